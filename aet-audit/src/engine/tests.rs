//! Unit tests of `engine`.

use super::*;
use crate::batch::lossy;

#[test]
fn path_ids_are_exact_whatever_the_front_cache_slot() {
    let policy =
        Policy::parse("[allow]\nread = [\"/usr/**\"]\n", Path::new("p.toml")).expect("policy");
    let mut e = Scanner::new(&policy, Vec::new());
    // Paths of one length whose first, middle and last words are equal collide in the
    // front cache; each must still get its own id, and the same id every time.
    let paths: Vec<Vec<u8>> = (0..3000u32)
        .map(|n| format!("/usr/share/aaaaaaaa{n:06}bbbbbbbbbb/x.txt").into_bytes())
        .chain([b"/a".to_vec(), b"/a\n\xff".to_vec(), Vec::new()])
        .collect();
    let ids: Vec<u32> = paths.iter().map(|p| e.path_id(p)).collect();
    for _ in 0..2 {
        for (p, id) in paths.iter().zip(&ids) {
            assert_eq!(e.path_id(p), *id);
            assert_eq!(&*e.path_bytes[*id as usize], p.as_slice());
        }
    }
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), paths.len());
}

#[test]
fn proc_magic_links_lead_to_the_file_they_name() {
    let mut fds = FxHashMap::default();
    fds.insert((7, 3), b"/task/answers/key.txt".to_vec());
    let a = |p: &str, pid| proc_alias(p.as_bytes(), pid, &fds).map(|v| lossy(&v));
    assert_eq!(a("/proc/self/root/etc/x", 7).as_deref(), Some("/etc/x"));
    assert_eq!(a("/proc/12/root", 7).as_deref(), Some("/"));
    assert_eq!(
        a("/proc/thread-self/fd/3", 7).as_deref(),
        Some("/task/answers/key.txt")
    );
    assert_eq!(
        a("/proc/7/fd/3", 1).as_deref(),
        Some("/task/answers/key.txt")
    );
    assert_eq!(
        a("/proc/self/root/proc/self/fd/3", 7).as_deref(),
        Some("/task/answers/key.txt")
    );
    // A path below a directory's fd, and the per-thread forms.
    fds.insert((7, 5), b"/task".to_vec());
    let a = |p: &str, pid| proc_alias(p.as_bytes(), pid, &fds).map(|v| lossy(&v));
    assert_eq!(
        a("/proc/self/fd/5/answers/key.txt", 7).as_deref(),
        Some("/task/answers/key.txt")
    );
    assert_eq!(
        a("/proc/7/task/8/fd/5/answers/", 1).as_deref(),
        Some("/task/answers/")
    );
    assert_eq!(
        a("/proc/self/task/9/root/etc/x", 7).as_deref(),
        Some("/etc/x")
    );
    assert_eq!(
        a("/proc/thread-self/root/proc/self/fd/5/answers/key.txt", 7).as_deref(),
        Some("/task/answers/key.txt")
    );
    assert_eq!(a("/proc/self/task/x/root/a", 7), None);
    assert_eq!(a("/proc/self/fd/4", 7), None);
    assert_eq!(a("/proc/self/rootx/a", 7), None);
    assert_eq!(a("/proc/self/status", 7), None);
    assert_eq!(a("/etc/passwd", 7), None);
}
