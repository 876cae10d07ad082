//! Work handed outside the run: a container client asking a daemon to start a container (its
//! processes are not the run's descendants), or a service manager or scheduler given a job. The
//! row maker notes them; the run's record is then incomplete.

use std::path::Path;

/// The container clients whose containers a daemon starts, outside the process tree of the run
/// that asked (podman, daemonless, starts them as its own descendants).
const DAEMON_CLIENTS: &[&str] = &["docker", "nerdctl", "ctr", "podman-remote"];

/// The subcommands that start or enter a container.
const STARTS: &[&str] = &["run", "create", "start", "exec", "restart", "compose", "up"];

/// Does this exec ask a container daemon to run processes outside the run? `Some(runtime)` when
/// it does: a `run`/`create` without `--cgroup-parent` at (or under) the run's cgroup, or a
/// `start`/`exec`/`compose` (their containers' cgroups were chosen before).
pub fn container_outside(argv: &[u8], run_cgroup: Option<&Path>) -> Option<String> {
    let args = tool_argv(argv, &[DAEMON_CLIENTS, &["podman"]])?;
    let name = base_name(args.first()?)?;
    let remote = name == "podman" && args.iter().any(|a| a == "--remote" || a == "-r");
    if !DAEMON_CLIENTS.contains(&name.as_str()) && !remote {
        return None;
    }
    let sub = args[1..]
        .iter()
        .find(|a| STARTS.contains(&a.as_str()))?
        .clone();
    if matches!(sub.as_str(), "run" | "create")
        && let Some(cg) = run_cgroup
    {
        let mut parent = None;
        for (i, a) in args.iter().enumerate() {
            if let Some(v) = a.strip_prefix("--cgroup-parent=") {
                parent = Some(v.to_owned());
            } else if a == "--cgroup-parent" {
                parent = args.get(i + 1).cloned();
            }
        }
        if parent.is_some_and(|p| Path::new(&p).starts_with(cg)) {
            return None;
        }
    }
    Some(name)
}

/// The service managers and schedulers [`service_outside`] knows.
const SERVICE_TOOLS: &[&str] = &[
    "systemd-run",
    "systemctl",
    "service",
    "at",
    "batch",
    "crontab",
];

fn base_name(arg: &str) -> Option<String> {
    Some(Path::new(arg).file_name()?.to_str()?.to_owned())
}

/// An exec's arguments as text, from the tool's name on, when one of `known` is among its first
/// three (a script run through its `#!` interpreter has the interpreter, and maybe its option,
/// before the script's path); `None`, without allocating, for every other exec.
fn tool_argv(argv: &[u8], known: &[&[&str]]) -> Option<Vec<String>> {
    let is_known = |a: &[u8]| {
        let name = a.rsplit(|&b| b == b'/').next().unwrap_or(a);
        known.iter().any(|k| k.iter().any(|n| n.as_bytes() == name))
    };
    let first = aet_ledger::util::split_argv(argv)
        .take(3)
        .position(is_known)?;
    Some(
        aet_ledger::util::split_argv(argv)
            .skip(first)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// Does this exec hand work to a service manager or scheduler that runs it outside the run (its
/// process tree and cgroup), now or later? `Some(tool)` when it does: `systemd-run` without
/// `--scope` (with it the command stays a descendant, and is followed), `systemctl` or `service`
/// starting a unit, `at`/`batch` queueing a job, `crontab` installing a table.
pub fn service_outside(argv: &[u8]) -> Option<String> {
    let args = tool_argv(argv, &[SERVICE_TOOLS])?;
    let name = base_name(args.first()?)?;
    let rest = &args[1..];
    let has = |f: &str| rest.iter().any(|a| a == f);
    let words: Vec<&str> = rest
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    let hands = match name.as_str() {
        "systemd-run" => !has("--scope") && !rest.is_empty(),
        "systemctl" => {
            let starts = [
                "start",
                "restart",
                "try-restart",
                "reload-or-restart",
                "try-reload-or-restart",
                "isolate",
            ];
            words.first().is_some_and(|w| starts.contains(w))
                || (words.first() == Some(&"enable") && has("--now"))
        }
        "service" => words
            .get(1)
            .is_some_and(|w| ["start", "restart", "try-restart", "force-reload"].contains(w)),
        // Listing, removing or showing jobs hands nothing over.
        "at" | "batch" => !["-l", "-r", "-d", "-c", "-V"].iter().any(|f| has(f)),
        "crontab" => !["-l", "-r"].iter().any(|f| has(f)),
        _ => false,
    };
    hands.then_some(name)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn container_clients_that_start_containers_outside_the_run_are_noticed() {
        let cg = Some(Path::new("/aet/run-1"));
        let out = |argv: &[u8]| container_outside(argv, cg);
        assert_eq!(
            out(b"docker\0run\0busybox\0cat\0/x\0"),
            Some("docker".into())
        );
        assert_eq!(
            out(b"/usr/bin/docker\0run\0--cgroup-parent=/aet/run-1\0busybox\0"),
            None
        );
        assert_eq!(
            out(b"docker\0run\0--cgroup-parent\0/aet/run-1\0busybox\0"),
            None
        );
        assert_eq!(
            out(b"docker\0run\0--cgroup-parent=/elsewhere\0busybox\0"),
            Some("docker".into())
        );
        assert_eq!(out(b"docker\0exec\0c1\0cat\0/x\0"), Some("docker".into()));
        assert_eq!(out(b"nerdctl\0run\0x\0"), Some("nerdctl".into()));
        assert_eq!(out(b"podman\0--remote\0run\0x\0"), Some("podman".into()));
        // Daemonless podman starts its containers as its own descendants; clients that do not
        // start containers are not flagged.
        assert_eq!(out(b"podman\0run\0x\0"), None);
        assert_eq!(out(b"docker\0ps\0"), None);
        assert_eq!(out(b"docker\0images\0"), None);
        assert_eq!(out(b"cat\0run\0"), None);
    }

    #[test]
    fn work_handed_to_a_service_manager_or_scheduler_is_noticed() {
        let out = |argv: &[u8]| service_outside(argv);
        assert_eq!(
            out(b"systemd-run\0--unit\0x\0sh\0-c\0work\0"),
            Some("systemd-run".into())
        );
        assert_eq!(
            out(b"/usr/bin/systemd-run\0--user\0make\0"),
            Some("systemd-run".into())
        );
        assert_eq!(out(b"systemd-run\0--scope\0make\0"), None);
        assert_eq!(
            out(b"systemctl\0start\0foo.service\0"),
            Some("systemctl".into())
        );
        assert_eq!(
            out(b"systemctl\0--user\0restart\0foo\0"),
            Some("systemctl".into())
        );
        assert_eq!(
            out(b"systemctl\0enable\0--now\0foo\0"),
            Some("systemctl".into())
        );
        assert_eq!(out(b"systemctl\0status\0foo\0"), None);
        assert_eq!(out(b"systemctl\0enable\0foo\0"), None);
        assert_eq!(out(b"service\0nginx\0start\0"), Some("service".into()));
        assert_eq!(out(b"service\0nginx\0status\0"), None);
        assert_eq!(out(b"at\0now\0"), Some("at".into()));
        assert_eq!(
            out(b"at\0-f\0job.sh\0now\0+\x001\0minute\0"),
            Some("at".into())
        );
        assert_eq!(out(b"at\0-l\0"), None);
        assert_eq!(out(b"batch\0"), Some("batch".into()));
        assert_eq!(out(b"crontab\0mytab\0"), Some("crontab".into()));
        assert_eq!(out(b"crontab\0-\0"), Some("crontab".into()));
        assert_eq!(out(b"crontab\0-l\0"), None);
        assert_eq!(out(b"make\0start\0"), None);
        // A script run through its interpreter.
        assert_eq!(
            out(b"/bin/sh\0/opt/bin/systemd-run\0--unit\0x\0true\0"),
            Some("systemd-run".into())
        );
        assert_eq!(out(b"/bin/sh\0-e\0/opt/bin/at\0now\0"), Some("at".into()));
        assert_eq!(out(b"/bin/sh\0/opt/bin/systemd-run\0--scope\0true\0"), None);
    }
}
