#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    aet::fuzz::quiet_caught_panics();
    aet::fuzz::policy(data)
});
