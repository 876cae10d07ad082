//! A record others can verify: the ledger's hash chain, `aet key new`, `aet run --sign` and
//! `aet verify`.

use std::{fs, path::Path, process::Output};

use aet_tests::*;

fn verify(run: &Path, key: Option<&Path>) -> (i32, String) {
    let mut c = aet();
    c.arg("verify").arg(run);
    if let Some(k) = key {
        c.arg("--key").arg(k);
    }
    let o: Output = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        text(&o.stdout) + &text(&o.stderr),
    )
}

fn new_key(dir: &Path, name: &str) -> std::path::PathBuf {
    let key = dir.join(name);
    let o = aet().args(["key", "new"]).arg(&key).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    key
}

/// A signed run under the demo policy, of 40,000 opens (several batches).
fn signed_run(dir: &Path, key: &Path) -> Run {
    let r = run_in(
        &dir.join("run"),
        &[
            "--sign",
            key.to_str().unwrap(),
            "--policy",
            root().join("policies/demo.toml").to_str().unwrap(),
        ],
        &[
            helper("openstorm").to_str().unwrap(),
            "40000",
            "/etc/hostname",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    r
}

fn copy_run(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Flips one byte of `file` at `at`.
fn flip(file: &Path, at: usize) {
    let mut b = fs::read(file).unwrap();
    b[at] ^= 0x01;
    fs::write(file, b).unwrap();
}

#[test]
fn keys_are_written_once_with_a_private_secret() {
    let dir = tempdir();
    let key = new_key(dir.path(), "k");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(dir.path().join("k.pub").exists());
    let again = aet().args(["key", "new"]).arg(&key).output().unwrap();
    assert_eq!(again.status.code(), Some(4), "{}", text(&again.stderr));
    assert!(text(&again.stderr).contains("k"), "{}", text(&again.stderr));
}

#[test]
fn an_untouched_signed_run_verifies_and_every_change_is_named() {
    let dir = tempdir();
    let key = new_key(dir.path(), "k");
    let r = signed_run(dir.path(), &key);
    let public = dir.path().join("k.pub");
    let (code, out) = verify(&r.out, Some(&public));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the hash chain holds"), "{out}");
    assert!(out.contains("the signature holds"), "{out}");
    let m: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(r.out.join("manifest.json")).unwrap()).unwrap();
    let audit: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(r.out.join("audit.json")).unwrap()).unwrap();
    let verdict = audit["verdict"].as_str().unwrap().to_owned();
    assert_eq!(m["verdict"], verdict.as_str(), "{m:#}");
    assert!(m["ledger_batches"].as_u64().unwrap() >= 2, "{m:#}");
    assert_eq!(m["complete"], true);
    assert_eq!(m["ebpf_object_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(m["policy"]["sha256"].as_str().unwrap().len(), 64, "{m:#}");

    // One byte of the second batch: the batch is named.
    let chain: serde_json::Value = serde_json::from_str(&r.meta()["aet.chain"]).unwrap();
    assert!(chain["batches"].as_array().unwrap().len() >= 2);
    let c = dir.path().join("batch");
    copy_run(&r.out, &c);
    let bytes = fs::read(c.join("ledger.arrow")).unwrap();
    let second = second_batch_offset(&bytes);
    // The writer closes a batch when it is full or when the stream pauses, so the first batch's
    // size is read from the ledger, not assumed.
    let first_rows = aet_ledger::reader::Ledger::open(&c.join("ledger.arrow"))
        .unwrap()
        .next_batch()
        .unwrap()
        .expect("a first batch")
        .num_rows();
    flip(&c.join("ledger.arrow"), second + 300);
    let (code, out) = verify(&c, Some(&public));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("batch 1 (rows {first_rows}–")),
        "{out}"
    );

    // The head (the command is in it).
    let c = dir.path().join("head");
    copy_run(&r.out, &c);
    flip(&c.join("ledger.arrow"), 200);
    let (code, out) = verify(&c, None);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("head") || out.contains("decode"), "{out}");

    // The end of the file: cut.
    let c = dir.path().join("cut");
    copy_run(&r.out, &c);
    let b = fs::read(c.join("ledger.arrow")).unwrap();
    fs::write(c.join("ledger.arrow"), &b[..b.len() - 100]).unwrap();
    let (code, out) = verify(&c, None);
    assert_eq!(code, 1, "{out}");

    // The footer's metadata: "complete" can not be forged into a record that said otherwise.
    let c = dir.path().join("footer");
    copy_run(&r.out, &c);
    let b = fs::read(c.join("ledger.arrow")).unwrap();
    let at = find_last(&b, b"aet.events_lost").expect("the footer names aet.events_lost");
    flip(&c.join("ledger.arrow"), at + 2);
    let (code, out) = verify(&c, None);
    assert_eq!(code, 1, "{out}");

    // The manifest's verdict, and its signature.
    let c = dir.path().join("manifest");
    copy_run(&r.out, &c);
    let text_m = fs::read_to_string(c.join("manifest.json")).unwrap();
    fs::write(
        c.join("manifest.json"),
        text_m.replace(
            &format!("\"verdict\": \"{verdict}\""),
            "\"verdict\": \"disqualified\"",
        ),
    )
    .unwrap();
    let (code, out) = verify(&c, Some(&public));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("signature does not match"), "{out}");
    let c = dir.path().join("signature");
    copy_run(&r.out, &c);
    let mut m2 = m.clone();
    let sig = m2["signature"].as_str().unwrap().to_owned();
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    m2["signature"] = serde_json::Value::String(format!("{flipped}{}", &sig[1..]));
    fs::write(c.join("manifest.json"), m2.to_string()).unwrap();
    let (code, out) = verify(&c, None);
    assert_eq!(code, 1, "{out}");

    // audit.json edited.
    let c = dir.path().join("audit");
    copy_run(&r.out, &c);
    let a = fs::read_to_string(c.join("audit.json")).unwrap();
    fs::write(
        c.join("audit.json"),
        a.replacen(&format!("\"{verdict}\""), "\"clean-ish\"", 1),
    )
    .unwrap();
    let (code, out) = verify(&c, None);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("audit.json"), "{out}");

    // The wrong public key.
    new_key(dir.path(), "other");
    let (code, out) = verify(&r.out, Some(&dir.path().join("other.pub")));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("another key"), "{out}");

    // A missing run, a missing key: 4.
    let (code, out) = verify(&dir.path().join("nothing"), None);
    assert_eq!(code, 4, "{out}");
    let (code, out) = verify(&r.out, Some(&dir.path().join("missing.pub")));
    assert_eq!(code, 4, "{out}");
}

#[test]
fn an_unsigned_run_verifies_its_chain_and_fails_when_a_key_is_asked_for() {
    let dir = tempdir();
    let r = run_ok(dir.path(), &["true"]);
    let (code, out) = verify(&r.out, None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("not signed"), "{out}");
    let key = new_key(dir.path(), "k");
    let _ = key;
    let (code, out) = verify(&r.out, Some(&dir.path().join("k.pub")));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("manifest.json is missing"), "{out}");
}

#[test]
fn a_bad_signing_key_stops_the_run_before_it_starts() {
    let dir = tempdir();
    let bad = dir.path().join("bad");
    fs::write(&bad, "not a key\n").unwrap();
    let marker = dir.path().join("ran");
    let r = run_in(
        &dir.path().join("run"),
        &["--sign", bad.to_str().unwrap()],
        &["touch", marker.to_str().unwrap()],
    );
    assert_eq!(r.code(), 125, "{}", r.stderr());
    assert!(r.stderr().contains("bad"), "{}", r.stderr());
    assert!(!marker.exists());
}

/// The footer's copies of two column names swapped (flatbuffer strings: length, bytes, NUL; the
/// footer holds the last copy).
fn swap_in_footer(file: &Path, a: &str, b: &str) {
    let mut bytes = fs::read(file).unwrap();
    let at = |n: &str| {
        let mut pat = (n.len() as u32).to_le_bytes().to_vec();
        pat.extend_from_slice(n.as_bytes());
        pat.push(0);
        4 + find_last(&bytes, &pat).unwrap()
    };
    let (ia, ib) = (at(a), at(b));
    bytes[ia..ia + a.len()].copy_from_slice(b.as_bytes());
    bytes[ib..ib + b.len()].copy_from_slice(a.as_bytes());
    fs::write(file, bytes).unwrap();
}

#[test]
fn a_footer_whose_columns_were_renamed_does_not_verify() {
    let dir = tempdir();
    let key = new_key(dir.path(), "k");
    let r = signed_run(dir.path(), &key);
    let public = dir.path().join("k.pub");
    let original = aet_tests::rows(&r.ledger());
    for (a, b) in [
        ("path", "comm"),
        ("resolved_path", "resolved_from"),
        ("kind", "comm"),
    ] {
        let c = dir.path().join(format!("swap-{a}"));
        copy_run(&r.out, &c);
        swap_in_footer(&c.join("ledger.arrow"), a, b);
        // The swap is real: a reader that trusts the footer (pyarrow) sees other column
        // names; aet's reader decodes the stream with the head's schema, the original rows.
        let names = |f: &Path| {
            let o = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import sys, pyarrow.ipc as i; print(i.open_file(sys.argv[1]).schema.names)",
                ])
                .arg(f)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o.stderr));
            text(&o.stdout)
        };
        assert_ne!(
            names(&c.join("ledger.arrow")),
            names(&r.ledger()),
            "{a} <-> {b}"
        );
        assert_eq!(
            aet_tests::rows(&c.join("ledger.arrow")),
            original,
            "{a} <-> {b}"
        );
        let (code, out) = verify(&c, Some(&public));
        assert_eq!(code, 1, "{a} <-> {b}: {out}");
        assert!(out.contains("footer's schema"), "{a} <-> {b}: {out}");
    }
}

/// The audit never judges what a doctored footer says: a ledger whose footer schema was changed
/// (columns renamed into each other's places) is read with the schema at its head, which the
/// chain hashes, and is inconclusive, the change named, where the original is clean.
#[test]
fn a_footer_whose_columns_were_renamed_is_never_audited_clean() {
    let dir = tempdir();
    let key = new_key(dir.path(), "k");
    let r = signed_run(dir.path(), &key);
    let policy = root().join("policies/demo.toml");
    let audit = |run: &Path| {
        let o = aet()
            .arg("audit")
            .arg(run)
            .arg("--policy")
            .arg(&policy)
            .args(["--json", "-"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&o.stdout), text(&o.stderr)));
        (o.status.code().unwrap_or(-1), v)
    };
    let (code, original) = audit(&r.out);
    assert!(code == 0 || code == 1, "{original}");
    for (a, b) in [
        ("path", "comm"),
        ("resolved_path", "resolved_from"),
        ("kind", "comm"),
    ] {
        let c = dir.path().join(format!("doctored-{a}"));
        copy_run(&r.out, &c);
        swap_in_footer(&c.join("ledger.arrow"), a, b);
        let (code, report) = audit(&c);
        assert_eq!(code, 3, "{a} <-> {b}: {report}");
        assert_eq!(report["verdict"], "inconclusive", "{a} <-> {b}: {report}");
        let reasons = report.to_string();
        assert!(
            reasons.contains("changed after aet wrote it") && reasons.contains(a),
            "{a} <-> {b}: {reasons}"
        );
        // The rows are the stream's: the same accesses as the original's.
        for key in ["counts", "out_of_scope", "cheat_hits"] {
            assert_eq!(
                report[key], original[key],
                "{a} <-> {b}: the doctored footer changed what was judged ({key})"
            );
        }
    }
}

#[test]
fn what_the_signature_does_not_cover_is_named_and_queries_say_so() {
    let dir = tempdir();
    let key = new_key(dir.path(), "k");
    let public = dir.path().join("k.pub");
    // Signed without a policy: the manifest covers no audit report.
    let bare = run_in(
        &dir.path().join("bare"),
        &["--sign", key.to_str().unwrap()],
        &["true"],
    );
    assert_eq!(bare.code(), 0, "{}", bare.stderr());
    let (code, out) = verify(&bare.out, Some(&public));
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("UNSIGNED"), "{out}");
    // A forged report beside it.
    let forged = serde_json::json!({"format": "aet.audit", "version": 1, "verdict": "clean",
        "cheat_hits": [], "contaminant_hits": [], "out_of_scope": [], "warnings": [],
        "blocked": []});
    fs::write(bare.out.join("audit.json"), forged.to_string()).unwrap();
    let (code, out) = verify(&bare.out, Some(&public));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("UNSIGNED") && out.contains("audit.json is not signed"),
        "{out}"
    );
    assert!(out.contains("except the files marked UNSIGNED"), "{out}");
    // A run signed with its audit: covered.
    let signed = signed_run(dir.path(), &key);
    let (code, out) = verify(&signed.out, Some(&public));
    assert_eq!(code, 0, "{out}");
    // The report and its HTML page are both signed: nothing is left unsigned.
    assert!(!out.contains("UNSIGNED"), "{out}");
    assert!(
        out.contains("audit.html is the one the manifest names"),
        "{out}"
    );
    // A page edited afterwards is found.
    let c = dir.path().join("html");
    copy_run(&signed.out, &c);
    fs::write(c.join("audit.html"), "<p>clean</p>").unwrap();
    let (code, out) = verify(&c, Some(&public));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("audit.html: sha256"), "{out}");
    let q = aet()
        .args([
            "query",
            "--format",
            "csv",
            "select run, verdict, verdict_signed from runs order by run",
        ])
        .arg(&bare.out)
        .arg(&signed.out)
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", text(&q.stderr));
    let csv = text(&q.stdout);
    assert!(csv.contains("bare,clean,false"), "{csv}");
    assert!(csv.contains("run,") && csv.contains(",true"), "{csv}");
    assert!(
        text(&q.stderr).contains("unsigned report of a signed run"),
        "{}",
        text(&q.stderr)
    );
}

fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// The offset of the second record batch, from the footer's block list.
fn second_batch_offset(bytes: &[u8]) -> usize {
    aet_ledger::chain::batch_spans(bytes).expect("a finished ledger")[1].start
}
