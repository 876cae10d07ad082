//! A run's control socket: how `aet phase` reaches a run in progress.
//!
//! `aet run` listens on a unix socket in aet's runtime directory (mode 0600, root's) and names
//! it in `DIR/control` for as long as the run goes on. A request is one JSON line, its answer
//! another. A process of the run itself (in its cgroup) is refused: the agent cannot declare
//! its own work graded. The socket and the file are removed when the run ends.

use std::{
    io::{self, BufRead as _, Write as _},
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use std::{
    os::unix::net::{UnixListener, UnixStream},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use serde::{Deserialize, Serialize};

use super::{fingerprints::Fingerprints, session::Session};
use aet_ledger::{metadata::PhaseRecord, ppath::PPath};

/// What `aet phase` asks.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Begin phase `name`; `keep`: pids that may stay alive into it.
    Phase { name: String, keep: Vec<u32> },
    /// The watched files: seen from `root`'s view from now on (a container's init, a process of
    /// the run) and fingerprinted now, with relative globs at `repo` (default: its working
    /// directory); or, `end`, fingerprinted at the end of the agent's phase.
    Watch {
        root: Option<u32>,
        repo: Option<PPath>,
        end: bool,
    },
}

/// The run's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Response {
    Phase { record: PhaseRecord },
    Watched { message: String },
    Refused { message: String },
}

/// A request the run's loop answers: what was asked, by whom, and where the answer goes.
pub struct Pending {
    pub request: Request,
    pub by: Option<u32>,
    reply: std::sync::mpsc::Sender<Response>,
}

impl Pending {
    /// Answers in `session`: a phase begun (the watched files fingerprinted first, at the end of
    /// the agent's phase), or the watched files' view named or their end taken.
    pub fn answer(self, session: &mut Session, watch: Option<&mut Fingerprints>) {
        let r = match self.request {
            Request::Phase { name, keep } => {
                if let Some(w) = watch
                    && w.started()
                    && !w.ended()
                {
                    match w.after(&format!("phase {name}")) {
                        Ok(()) => eprint_line(w.describe(true)),
                        Err(e) => eprintln!("aet: error: watched files: {e}"),
                    }
                }
                match session.begin_phase(&name, keep, self.by) {
                    Ok(record) => Response::Phase { record },
                    Err(message) => Response::Refused { message },
                }
            }
            Request::Watch { root, repo, end } => watch_request(watch, root, repo, end),
        };
        let _ = self.reply.send(r);
    }
}

fn eprint_line(line: Option<String>) {
    if let Some(l) = line {
        eprintln!("aet: {l}");
    }
}

/// `aet watch`: the view named and the first fingerprints taken, or the end taken.
fn watch_request(
    watch: Option<&mut Fingerprints>,
    root: Option<u32>,
    repo: Option<PPath>,
    end: bool,
) -> Response {
    let refused = |message: String| Response::Refused { message };
    let Some(w) = watch else {
        // A harness may name the view of every run: one whose policy watches nothing has
        // nothing to fingerprint.
        return Response::Watched {
            message: "the run's policy watches no files (no [watch.NAME]): nothing to \
                      fingerprint"
                .into(),
        };
    };
    if end {
        if !w.started() {
            return refused(
                "the watched files were never fingerprinted: name their view first \
                            (aet watch RUN_DIR --root PID)"
                    .into(),
            );
        }
        if w.ended() {
            return refused("the agent's phase was already fingerprinted at its end".into());
        }
        return match w.after("aet watch --end") {
            Ok(()) => Response::Watched {
                message: w.describe(true).unwrap_or_default(),
            },
            Err(e) => refused(e),
        };
    }
    let Some(pid) = root else {
        return refused("name the view (--root PID) or the end (--end)".into());
    };
    if !w.deferred || w.started() {
        return refused(
            "the watched files were fingerprinted already (a run names its view once, and only \
             with `aet run --defer-watch`)"
                .into(),
        );
    }
    let view = match super::fingerprints::View::of_process(pid) {
        Ok(v) => v,
        Err(e) => return refused(e),
    };
    let ctx = super::fingerprints::process_context(pid, repo);
    match w.before(view, ctx) {
        Ok(()) => Response::Watched {
            message: w.describe(false).unwrap_or_default(),
        },
        Err(e) => refused(format!("the watched files cannot be fingerprinted: {e}")),
    }
}

/// A run's control socket, open while the run goes on. A thread accepts connections and reads
/// their requests; the run's loop answers them ([`Control::next`]), where the session is.
pub struct Control {
    socket: PathBuf,
    file: PathBuf,
    stop: Arc<AtomicBool>,
    requests: tokio::sync::mpsc::UnboundedReceiver<Pending>,
}

/// How long a client may take to send its request, and the run to answer it.
const REQUEST_LIMIT: Duration = Duration::from_secs(2);
/// The answer may include fingerprinting the watched files (bounded by the policy's limits).
const ANSWER_LIMIT: Duration = Duration::from_secs(300);

impl Control {
    /// Listens for the run whose directory is `out` and whose cgroup is `run_cgroup`.
    pub fn open(out: &Path, run_cgroup: &Path) -> io::Result<Self> {
        let socket = aet_sandbox::runtime_dir()?.join(format!(
            "control-{}-{}.sock",
            std::process::id(),
            aet_ledger::util::now_ns()
        ));
        let listener = UnixListener::bind(&socket)?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        let file = out.join(aet_ledger::run_dir::CONTROL);
        std::fs::write(&file, socket.as_os_str().as_encoded_bytes())?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, requests) = tokio::sync::mpsc::unbounded_channel();
        let run_cgroup = run_cgroup.to_owned();
        {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("aet-control".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        if let Ok(stream) = conn {
                            serve(stream, &run_cgroup, &tx);
                        }
                    }
                })?;
        }
        Ok(Self {
            socket,
            file,
            stop,
            requests,
        })
    }

    /// The next request.
    pub async fn next(&mut self) -> Option<Pending> {
        self.requests.recv().await
    }
}

/// Reads one connection's request and hands it to the run (a process of the run is refused
/// here).
fn serve(
    mut stream: UnixStream,
    run_cgroup: &Path,
    tx: &tokio::sync::mpsc::UnboundedSender<Pending>,
) {
    let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.pid() as u32);
    let _ = stream.set_read_timeout(Some(REQUEST_LIMIT));
    let mut line = String::new();
    if io::BufReader::new(&stream).read_line(&mut line).is_err() {
        return;
    }
    let response = match serde_json::from_str::<Request>(&line) {
        Err(e) => Response::Refused {
            message: format!("not a request: {e}"),
        },
        Ok(r)
            if peer.is_some_and(|pid| {
                aet_kernel::cgroup::cgroup_of(pid).is_ok_and(|cg| cg.starts_with(run_cgroup))
            }) =>
        {
            Response::Refused {
                message: format!(
                    "process {} is part of the run: a run's {} from outside it",
                    peer.unwrap_or_default(),
                    match r {
                        Request::Phase { .. } => "phases are marked",
                        Request::Watch { .. } => "watched files are named and ended",
                    }
                ),
            }
        }
        Ok(Request::Watch {
            root: Some(pid), ..
        }) if !aet_kernel::cgroup::cgroup_of(pid).is_ok_and(|cg| cg.starts_with(run_cgroup)) => {
            Response::Refused {
                message: format!(
                    "process {pid} is not part of the run: the watched files are seen from a \
                     process of the run (a container started with --cgroup-parent=\"$AET_CGROUP\")"
                ),
            }
        }
        Ok(request) => {
            let (reply, answer) = std::sync::mpsc::channel();
            if tx
                .send(Pending {
                    request,
                    by: peer,
                    reply,
                })
                .is_err()
            {
                return;
            }
            match answer.recv_timeout(ANSWER_LIMIT) {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    let mut text = serde_json::to_string(&response).expect("responses serialise");
    text.push('\n');
    let _ = stream.write_all(text.as_bytes());
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = std::fs::remove_file(&self.file);
        // Wakes the thread's accept, so that it sees the stop.
        let _ = UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `aet phase`: asks the run in progress in `dir` to begin phase `name`.
pub fn request_phase(dir: &Path, name: &str, keep: &[u32]) -> Result<PhaseRecord, PhaseError> {
    aet_ledger::metadata::valid_phase_name(name).map_err(PhaseError::Refused)?;
    match call(
        dir,
        &Request::Phase {
            name: name.to_owned(),
            keep: keep.to_vec(),
        },
    )? {
        Response::Phase { record } => Ok(record),
        Response::Refused { message } => Err(PhaseError::Refused(message)),
        Response::Watched { message } => Err(PhaseError::Refused(format!(
            "an answer to another request: {message}"
        ))),
    }
}

/// `aet watch`: names the watched files' view, or their end, to the run in progress in `dir`;
/// what the run said of the snapshot.
pub fn request_watch(
    dir: &Path,
    root: Option<u32>,
    repo: Option<PPath>,
    end: bool,
) -> Result<String, PhaseError> {
    match call(dir, &Request::Watch { root, repo, end })? {
        Response::Watched { message } => Ok(message),
        Response::Refused { message } => Err(PhaseError::Refused(message)),
        Response::Phase { .. } => Err(PhaseError::Refused("an answer to another request".into())),
    }
}

/// One request to the run in progress in `dir`, and its answer.
fn call(dir: &Path, request: &Request) -> Result<Response, PhaseError> {
    let file = dir.join(aet_ledger::run_dir::CONTROL);
    let socket = match std::fs::read(&file) {
        Ok(s) => PathBuf::from(std::ffi::OsString::from(
            String::from_utf8_lossy(&s).into_owned(),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(PhaseError::NotRunning(dir.to_owned()));
        }
        Err(e) => return Err(PhaseError::Io(file, e)),
    };
    let io = |e| PhaseError::Io(socket.clone(), e);
    let mut stream = match std::os::unix::net::UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(PhaseError::NotRunning(dir.to_owned()));
        }
        Err(e) => return Err(io(e)),
    };
    stream
        .set_read_timeout(Some(ANSWER_LIMIT + Duration::from_secs(5)))
        .map_err(io)?;
    let mut line = serde_json::to_string(request).expect("requests serialise");
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(io)?;
    let mut answer = String::new();
    io::BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(io)?;
    match serde_json::from_str::<Response>(&answer) {
        Ok(r) => Ok(r),
        Err(_) if answer.is_empty() => Err(PhaseError::NotRunning(dir.to_owned())),
        Err(e) => Err(PhaseError::Io(
            socket.clone(),
            io::Error::other(format!("not an answer: {e}")),
        )),
    }
}

/// Why `aet phase` did not begin a phase.
#[derive(Debug, thiserror::Error)]
pub enum PhaseError {
    #[error("{0} has no run in progress (no aet run is recording into it, or the run has ended)")]
    NotRunning(PathBuf),
    #[error("the run refused: {0}")]
    Refused(String),
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] io::Error),
}
