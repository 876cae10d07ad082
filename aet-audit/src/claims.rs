//! The transcript held against what ran: the shell calls whose programs never ran in their
//! window (a fabricated or replayed transcript, or a tool that ran elsewhere), and the
//! processes no tool call accounts for (the harness, the agent's own runtime, a background job
//! that acted after its call returned), each with its ancestry and what it touched.
//!
//! A call is matched to the execs of the run by time where the transcript has times (an exec
//! between the call's start and its result, give or take [`SLACK_NS`] for the two clocks), by
//! command otherwise. A program "ran" when an exec's file, its `argv[0]`, the script an
//! interpreter was given, or the module of `python -m` has the program's name.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use aet_common::EventKind;
use arrow_array::Array as _;

use crate::{
    batch::{BatchCols, argv_at},
    finding::Proc,
    transcript::{ToolCall, ToolCallRef},
};

/// How far apart the transcript's clock and the kernel's may be, either way.
pub const SLACK_NS: i64 = 2_000_000_000;
/// Paths kept per process as a sample of what it touched (its latest).
const SAMPLE: usize = 8;
/// Processes listed at most (the rest are counted).
const LISTED: usize = 200;

/// One successful exec of the run: when, by whom, and the names it answers to.
#[derive(Clone, Debug, Default)]
pub struct ExecSeen {
    pub pid: u32,
    pub ts_ns: i64,
    pub names: Vec<String>,
}

/// What the scan keeps for the claims: every exec, and what each process touched.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Kept only when a transcript is to be held against the record.
    pub enabled: bool,
    pub execs: Vec<ExecSeen>,
    /// By pid: distinct paths touched (counted up to a bound), and a sample.
    pub touched: HashMap<u32, (u64, Vec<String>)>,
    /// By pid: when it last touched something (a row of `touched`'s kinds).
    pub last_touch: HashMap<u32, i64>,
}

impl Seen {
    /// One row of a process of the run (aet's set-up left out by the caller).
    pub(crate) fn row(&mut self, c: &BatchCols<'_>, i: usize, pid: u32, kind: Option<EventKind>) {
        if !self.enabled {
            return;
        }
        let ok = c.ret.is_valid(i) && c.ret.value(i) >= 0;
        if kind == Some(EventKind::Exec) && ok {
            let mut names = Vec::new();
            for p in [c.resolved.get(i), c.path.get(i)].into_iter().flatten() {
                push_name(&mut names, p);
            }
            if let Some(argv) = argv_at(c.argv, i) {
                for (n, a) in argv.iter().enumerate().take(2) {
                    if n == 1 && a.starts_with('-') {
                        break;
                    }
                    push_name(&mut names, a.as_bytes());
                }
                // `python -m pytest`: the module is the program.
                if let Some(m) = argv
                    .iter()
                    .position(|a| a == "-m")
                    .and_then(|k| argv.get(k + 1))
                {
                    push_name(&mut names, m.as_bytes());
                }
            }
            self.execs.push(ExecSeen {
                pid,
                ts_ns: c.ts.value(i),
                names,
            });
        }
        // What it opened, ran or changed (probes and mappings are not what it touched), the
        // latest kept: a program's own loading comes first, its work after.
        if ok
            && matches!(
                kind,
                Some(EventKind::Open | EventKind::Exec | EventKind::Modify | EventKind::List)
            )
            && let Some(p) = c.resolved.get(i)
        {
            let e = self.touched.entry(pid).or_default();
            let text = String::from_utf8_lossy(p).into_owned();
            e.1.retain(|x| *x != text);
            if e.1.len() == SAMPLE {
                e.1.remove(0);
            }
            e.1.push(text);
            e.0 += 1;
            let t = self.last_touch.entry(pid).or_insert(i64::MIN);
            *t = (*t).max(c.ts.value(i));
        }
    }
}

fn push_name(names: &mut Vec<String>, path: &[u8]) {
    let base = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    let s = String::from_utf8_lossy(base).into_owned();
    if !s.is_empty() && !names.contains(&s) {
        names.push(s);
    }
}

/// A shell call whose programs did not all run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UnrunCall {
    pub tool_call: ToolCallRef,
    pub command: String,
    /// The programs the command names that no exec of its window ran.
    pub missing: Vec<String>,
    /// What the transcript says the call returned (its first characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// `time` (the call's window) or `command` (the transcript has no times: the whole run).
    pub matched_by: String,
}

/// A process of the run that no tool call accounts for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Unaccounted {
    pub pid: u32,
    pub exe: Option<String>,
    pub argv: Option<Vec<String>>,
    /// Its ancestors, nearest first: `pid comm`.
    pub ancestry: Vec<String>,
    /// Its opens, execs, changes and listings, and the latest of their paths.
    pub touched: u64,
    pub sample: Vec<String>,
    pub first_ts_ns: i64,
}

/// What [`compare`] found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Claims {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrun_calls: Vec<UnrunCall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unaccounted: Vec<Unaccounted>,
    /// Unaccounted processes beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unaccounted_more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Shell builtins and keywords: what a shell runs without an exec.
const BUILTINS: &[&str] = &[
    "cd", "echo", "printf", "export", "set", "unset", "source", ".", "true", "false", "test", "[",
    "[[", "]]", "exit", "return", "read", "wait", "pwd", "alias", "eval", "shift", "type", "if",
    "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in",
    "function", "local", "declare", "trap", "ulimit", "umask", "{", "}", "!", "let", ":", "break",
    "continue", "hash", "jobs", "fg", "bg", "kill", "builtin", "readonly", "shopt", "pushd",
    "popd", "dirs", "history", "getopts", "times", "select",
];
/// Keywords a command follows (`if grep ...`, `do make`): the next word is the program.
const LEADING: &[&str] = &[
    "if", "then", "else", "elif", "do", "while", "until", "{", "!",
];
/// Words that run the next word as the program.
const WRAPPERS: &[&str] = &[
    "sudo", "env", "nohup", "time", "nice", "exec", "command", "stdbuf", "ionice", "setsid",
];

/// The programs a shell command runs by name, in order, each once: the first word of each
/// simple command (split at `;`, `&&`, `||`, `|`, `&`, newlines and parentheses outside
/// quotes), past variable assignments and wrappers (`sudo`, `env`, `timeout N`), builtins and
/// keywords left out, here-documents skipped.
pub fn programs(cmd: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut heredoc: Option<String> = None;
    let finish = |words: &mut Vec<String>, out: &mut Vec<String>| {
        if let Some(p) = first_program(words)
            && !out.contains(&p)
        {
            out.push(p);
        }
        words.clear();
    };
    for line in cmd.split_inclusive('\n') {
        if let Some(tag) = &heredoc {
            if line.trim() == tag {
                heredoc = None;
            }
            continue;
        }
        let mut chars = line.chars().peekable();
        while let Some(ch) = chars.next() {
            match (quote, ch) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.push(c),
                (None, '\'' | '"') => quote = Some(ch),
                (None, '\\') => {
                    if let Some(n) = chars.next() {
                        word.push(n);
                    }
                }
                (None, '<') if chars.peek() == Some(&'<') => {
                    chars.next();
                    // `<<EOF`, `<<-'EOF'`: the body, up to the tag's line, is not commands.
                    let rest: String = chars.clone().collect();
                    let tag: String = rest
                        .trim_start_matches('-')
                        .trim_start()
                        .trim_matches(|c| c == '\'' || c == '"')
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !tag.is_empty() {
                        heredoc = Some(tag);
                    }
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                    // The tag itself is not a word of the command.
                    while chars
                        .peek()
                        .is_some_and(|c| !c.is_whitespace() && !";&|".contains(*c))
                    {
                        chars.next();
                    }
                }
                // `2>&1`, `>&2`, `&>file`: a redirection, not a separator.
                (None, '&')
                    if word.ends_with('>') || word.ends_with('<') || chars.peek() == Some(&'>') =>
                {
                    word.push('&');
                }
                (None, c) if c.is_whitespace() && c != '\n' => {
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                }
                (None, ';' | '&' | '|' | '(' | ')' | '\n' | '`') => {
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                    finish(&mut words, &mut out);
                }
                (None, c) => word.push(c),
            }
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    finish(&mut words, &mut out);
    out
}

fn first_program(words: &[String]) -> Option<String> {
    let mut it = words.iter().peekable();
    while let Some(w) = it.next() {
        if w.contains('=') && !w.starts_with('=') && !w.contains('/') {
            continue; // VAR=value
        }
        if w.starts_with('>')
            || w.starts_with('<')
            || w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('>')
        {
            continue; // a redirection
        }
        let base = w.rsplit('/').next().unwrap_or(w);
        if LEADING.contains(&base) {
            continue;
        }
        if WRAPPERS.contains(&base) {
            // Their options, then the program.
            while it
                .peek()
                .is_some_and(|n| n.starts_with('-') || n.contains('='))
            {
                it.next();
            }
            continue;
        }
        if base == "timeout" {
            while it.peek().is_some_and(|n| n.starts_with('-')) {
                it.next();
            }
            it.next(); // the duration
            continue;
        }
        if BUILTINS.contains(&base) || base.starts_with('$') || base.is_empty() {
            return None;
        }
        return Some(base.to_owned());
    }
    None
}

/// Does an exec with `names` run `program`? Equal names, or a versioned one (`python3.11` for
/// `python3`, `python3` for `python`).
fn runs(names: &[String], program: &str) -> bool {
    names.iter().any(|n| {
        n == program
            || n.strip_prefix(program).is_some_and(|rest| {
                !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == '.')
            })
    })
}

/// The calls' windows: from the call's start to its result (or the next call's start), widened
/// by [`SLACK_NS`]; `None` for a call without a time.
fn windows(calls: &[ToolCall]) -> Vec<Option<(i64, i64)>> {
    let mut starts: Vec<i64> = calls.iter().filter_map(|c| c.started_ns).collect();
    starts.sort_unstable();
    calls
        .iter()
        .map(|c| {
            let s = c.started_ns?;
            let e = c
                .ended_ns
                .or_else(|| starts.get(starts.partition_point(|&x| x <= s)).copied())
                .unwrap_or(i64::MAX - SLACK_NS);
            Some((s - SLACK_NS, e.max(s) + SLACK_NS))
        })
        .collect()
}

/// The transcript against the record.
pub fn compare(calls: &[ToolCall], seen: &Seen, procs: &[Proc]) -> Claims {
    let wins = windows(calls);
    let mut out = Claims::default();
    for (c, w) in calls.iter().zip(&wins) {
        let Some(cmd) = c.command.as_deref() else {
            continue;
        };
        if c.kind != crate::transcript::Kind::Shell {
            continue;
        }
        let in_window = |e: &&ExecSeen| w.is_none_or(|(a, b)| a <= e.ts_ns && e.ts_ns <= b);
        let missing: Vec<String> = programs(cmd)
            .into_iter()
            .filter(|p| {
                !seen
                    .execs
                    .iter()
                    .filter(in_window)
                    .any(|e| runs(&e.names, p))
            })
            .collect();
        if !missing.is_empty() {
            out.unrun_calls.push(UnrunCall {
                tool_call: c.reference(),
                command: cmd.to_owned(),
                missing,
                result: c.result.clone(),
                matched_by: if w.is_some() { "time" } else { "command" }.into(),
            });
        }
    }
    // A process is accounted for when its first exec falls in a shell call's window (by
    // command, when the transcript has no times), or it never exec'd and its parent is.
    let by_pid: HashMap<u32, &Proc> = procs.iter().map(|p| (p.pid, p)).collect();
    let mut first_exec: HashMap<u32, &ExecSeen> = HashMap::new();
    for e in &seen.execs {
        first_exec.entry(e.pid).or_insert(e);
    }
    let shell: Vec<(&ToolCall, &Option<(i64, i64)>)> = calls
        .iter()
        .zip(&wins)
        .filter(|(c, _)| c.kind == crate::transcript::Kind::Shell && c.command.is_some())
        .collect();
    let explained = |e: &ExecSeen| {
        shell.iter().any(|(c, w)| match w {
            Some((a, b)) => *a <= e.ts_ns && e.ts_ns <= *b,
            None => programs(c.command.as_deref().unwrap_or(""))
                .iter()
                .any(|p| runs(&e.names, p)),
        })
    };
    let mut memo: HashMap<u32, bool> = HashMap::new();
    fn accounted(
        pid: u32,
        depth: usize,
        by_pid: &HashMap<u32, &Proc>,
        first_exec: &HashMap<u32, &ExecSeen>,
        explained: &dyn Fn(&ExecSeen) -> bool,
        memo: &mut HashMap<u32, bool>,
    ) -> bool {
        if let Some(&v) = memo.get(&pid) {
            return v;
        }
        let v = match first_exec.get(&pid) {
            Some(e) => explained(e),
            None => match by_pid.get(&pid) {
                Some(p) if depth < 256 && p.ppid != pid => {
                    accounted(p.ppid, depth + 1, by_pid, first_exec, explained, memo)
                }
                _ => false,
            },
        };
        memo.insert(pid, v);
        v
    }
    // How a listed process is shown: its ancestry and what it touched.
    let unaccounted = |p: &Proc, first_ts_ns: i64| {
        let mut ancestry = Vec::new();
        let mut cur = by_pid.get(&p.ppid);
        while let Some(a) = cur {
            if ancestry.len() >= 32 {
                break;
            }
            ancestry.push(format!("{} {}", a.pid, a.comm));
            cur = (a.ppid != a.pid).then(|| by_pid.get(&a.ppid)).flatten();
        }
        let (touched, sample) = seen.touched.get(&p.pid).cloned().unwrap_or_default();
        Unaccounted {
            pid: p.pid,
            exe: p.exe.clone(),
            argv: p.argv.clone(),
            ancestry,
            touched,
            sample,
            first_ts_ns,
        }
    };
    for p in procs
        .iter()
        .filter(|p| !p.setup && first_exec.contains_key(&p.pid))
    {
        if accounted(p.pid, 0, &by_pid, &first_exec, &explained, &mut memo) {
            continue;
        }
        if out.unaccounted.len() >= LISTED {
            out.unaccounted_more += 1;
            continue;
        }
        out.unaccounted.push(unaccounted(
            p,
            first_exec.get(&p.pid).map_or(p.first_ts_ns, |e| e.ts_ns),
        ));
    }
    // A process that never exec'd (a fork: a daemonised helper, a subshell) is its nearest
    // exec'd ancestor's; when that ancestor is accounted for by calls with times and the fork
    // still touched files after the last of those calls ended, no call accounts for what it
    // did then: listed too. (An ancestor no call accounts for is listed itself.)
    for p in procs
        .iter()
        .filter(|p| !p.setup && !first_exec.contains_key(&p.pid))
    {
        let Some(&last) = seen.last_touch.get(&p.pid) else {
            continue;
        };
        let mut anc = by_pid.get(&p.ppid);
        let mut depth = 0;
        let exec = loop {
            let Some(a) = anc else { break None };
            if let Some(e) = first_exec.get(&a.pid) {
                break Some(*e);
            }
            depth += 1;
            if depth >= 256 || a.ppid == a.pid {
                break None;
            }
            anc = by_pid.get(&a.ppid);
        };
        let Some(e) = exec else { continue };
        let ends: Vec<i64> = shell
            .iter()
            .filter_map(|(_, w)| **w)
            .filter(|(a, b)| *a <= e.ts_ns && e.ts_ns <= *b)
            .map(|(_, b)| b)
            .collect();
        let Some(end) = ends.into_iter().max() else {
            continue;
        };
        if last <= end {
            continue;
        }
        if out.unaccounted.len() >= LISTED {
            out.unaccounted_more += 1;
            continue;
        }
        out.unaccounted.push(unaccounted(p, p.first_ts_ns));
    }
    out
}

/// The claims a policy makes findings of (`[transcripts] unrun`, `unaccounted`): a shell call
/// whose programs never ran (rule `transcripts.unrun`, access `claimed`, the path its first
/// missing program), and a process no call accounts for (rule `transcripts.unaccounted`,
/// access `unaccounted`, the path its program).
pub fn findings(claims: &Claims, policy: &crate::policy::Policy) -> Vec<crate::finding::Finding> {
    use crate::finding::{Ancestor, Class, Finding, Outcome};
    let finding = |class: Class, rule: &str, access: &'static str, path: String| Finding {
        class,
        rule: rule.into(),
        outcome: Outcome::Hit,
        access: std::borrow::Cow::Borrowed(access),
        path,
        path_hex: None,
        raw_path: None,
        host_path: None,
        errno: None,
        count: 1,
        first_seq: u64::MAX,
        first_ts_ns: 0,
        last_ts_ns: 0,
        pid: 0,
        uid: 0,
        comm: String::new(),
        exe: None,
        argv: None,
        ancestry: Vec::new(),
        tool_call: None,
        mentioned_in_transcript: None,
        reached: None,
        target_pid: None,
        phase: aet_ledger::metadata::FIRST_PHASE.into(),
        watch: None,
        provenance: None,
    };
    let mut out = Vec::new();
    if let Some(sev) = policy.unrun_calls {
        for u in &claims.unrun_calls {
            let mut f = finding(
                Class::from(sev),
                "transcripts.unrun",
                "claimed",
                u.missing.join(" "),
            );
            f.tool_call = Some(u.tool_call.clone());
            f.mentioned_in_transcript = Some(true);
            f.comm = "(a tool call)".into();
            f.argv = Some(vec![u.command.clone()]);
            out.push(f);
        }
    }
    if let Some(sev) = policy.unaccounted_processes {
        for u in &claims.unaccounted {
            let mut f = finding(
                Class::from(sev),
                "transcripts.unaccounted",
                "unaccounted",
                u.exe.clone().unwrap_or_default(),
            );
            f.pid = u.pid;
            f.first_ts_ns = u.first_ts_ns;
            f.last_ts_ns = u.first_ts_ns;
            f.exe = u.exe.clone();
            f.argv = u.argv.clone();
            f.comm = u
                .exe
                .as_deref()
                .and_then(|e| e.rsplit('/').next())
                .unwrap_or("")
                .into();
            f.mentioned_in_transcript = Some(false);
            f.ancestry = u
                .ancestry
                .iter()
                .filter_map(|a| {
                    let (pid, comm) = a.split_once(' ')?;
                    Some(Ancestor {
                        pid: pid.parse().ok()?,
                        comm: comm.into(),
                    })
                })
                .collect();
            out.push(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's `sh` forks a child that never execs and keeps touching files after the call
    /// returned: listed; a fork that stayed within its call is not, nor one whose exec'd
    /// ancestor no call accounts for (that ancestor is listed itself).
    #[test]
    fn a_fork_acting_after_its_call_returned_is_unaccounted() {
        const S: i64 = 1_000_000_000;
        let call = ToolCall {
            kind: crate::transcript::Kind::Shell,
            command: Some("sh -c 'work &'".into()),
            started_ns: Some(100 * S),
            ended_ns: Some(110 * S),
            ..ToolCall::default()
        };
        let proc = |pid, ppid, comm: &str| Proc {
            pid,
            ppid,
            comm: comm.into(),
            first_ts_ns: 0,
            ..Proc::default()
        };
        let procs = vec![
            proc(10, 1, "agent"),
            proc(20, 10, "sh"),
            proc(21, 20, "sh"),
            proc(22, 20, "sh"),
            proc(30, 10, "agent"),
        ];
        let mut seen = Seen {
            enabled: true,
            ..Seen::default()
        };
        let exec = |pid, ts_ns, name: &str| ExecSeen {
            pid,
            ts_ns,
            names: vec![name.into()],
        };
        seen.execs = vec![exec(10, S, "agent"), exec(20, 101 * S, "sh")];
        // 21 worked a minute after the call ended; 22 within it; 30 (the agent's own fork,
        // outside every call) late too, but its ancestor is listed for it.
        seen.last_touch = [(21, 170 * S), (22, 105 * S), (30, 200 * S)].into();
        seen.touched
            .insert(21, (1, vec!["/task/answers.txt".into()]));
        let claims = compare(&[call], &seen, &procs);
        let listed: Vec<u32> = claims.unaccounted.iter().map(|u| u.pid).collect();
        assert_eq!(listed, [10, 21], "{:#?}", claims.unaccounted);
        let late = &claims.unaccounted[1];
        assert_eq!(late.sample, ["/task/answers.txt"]);
        assert_eq!(late.ancestry, ["20 sh", "10 agent"]);
    }

    #[test]
    fn a_commands_programs_are_the_first_words_of_its_simple_commands() {
        assert_eq!(programs("pytest -q"), ["pytest"]);
        assert_eq!(
            programs("cd /repo && PYTHONPATH=src python -m pytest -x | tee out.log; echo done"),
            ["python", "tee"]
        );
        assert_eq!(
            programs("sudo -E env A=1 make -j2 >/dev/null 2>&1"),
            ["make"]
        );
        assert_eq!(
            programs("timeout 30 ./run.sh; (git status)"),
            ["run.sh", "git"]
        );
        assert_eq!(
            programs("cat <<EOF > f.txt\nrm -rf /\nEOF\nwc -l f.txt"),
            ["cat", "wc"]
        );
        assert_eq!(
            programs("python3 -c 'import os; os.system(\"ls\")'"),
            ["python3"]
        );
        assert_eq!(programs("for f in *.py; do black \"$f\"; done"), ["black"]);
        assert_eq!(programs("export X=1; $EDITOR file"), Vec::<String>::new());
    }

    #[test]
    fn a_versioned_interpreter_runs_its_unversioned_name() {
        let names = vec!["python3.11".to_owned(), "pytest".to_owned()];
        assert!(runs(&names, "python3") && runs(&names, "python") && runs(&names, "pytest"));
        assert!(!runs(&names, "py") && !runs(&names, "pytes"));
    }
}
