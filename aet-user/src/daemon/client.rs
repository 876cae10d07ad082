//! The daemon's client: what `aet run`, `aet monitor` and `aet daemon status` use to talk to a
//! running `aet daemon`.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::version::BUILD_ID;
use aet_monitor::daemon::{
    DaemonError,
    protocol::{Request, Response, VERSION},
};

/// How long a request may take before the daemon is taken as unresponsive (a `Stop` drains
/// the run's records, which can take seconds on a loaded host).
pub const CALL_LIMIT: Duration = Duration::from_secs(60);

/// How long one wait for an answer lasts before the daemon's state is looked at.
const POLL: Duration = Duration::from_millis(500);

/// A connection to the daemon.
pub struct Client {
    socket: PathBuf,
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    /// Set when the daemon hung up (it died): see [`Client::watch`].
    gone: Arc<AtomicBool>,
    /// Set while the conversation is ending, so that a hang-up then is not a death.
    closing: Arc<AtomicBool>,
    /// Answers still to come to requests given up on (the daemon did not answer in time):
    /// each is read and dropped before the next request's, which would otherwise be taken
    /// for it.
    owed: usize,
    /// The part of an answer read before a wait ended (the rest follows it).
    partial: Vec<u8>,
    /// The daemon's ring buffer size and most runs, from its greeting.
    pub ringbuf_bytes: u32,
    pub max_runs: u32,
    pub pid: u32,
    /// How the daemon was started (`manual`, `auto`, `socket`), from its greeting.
    pub started: String,
}

impl Client {
    /// Connects to the daemon at `socket`. `Ok(None)` when no daemon listens there (no socket
    /// file, or nobody accepting); an error when one accepted and then failed.
    pub fn connect(socket: &Path) -> Result<Option<Self>, DaemonError> {
        let stream = match UnixStream::connect(socket) {
            Ok(s) => s,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(DaemonError::Io {
                    socket: socket.to_owned(),
                    source: e,
                });
            }
        };
        let io = |source| DaemonError::Io {
            socket: socket.to_owned(),
            source,
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(io)?;
        let reader = BufReader::new(stream.try_clone().map_err(io)?);
        let mut c = Self {
            socket: socket.to_owned(),
            stream,
            reader,
            gone: Arc::new(AtomicBool::new(false)),
            closing: Arc::new(AtomicBool::new(false)),
            owed: 0,
            partial: Vec::new(),
            ringbuf_bytes: 0,
            max_runs: 0,
            pid: 0,
            started: String::new(),
        };
        match c.call(&Request::Hello {
            version: VERSION,
            build: BUILD_ID.into(),
        })? {
            Response::Hello {
                version,
                build,
                pid,
                ringbuf_bytes,
                max_runs,
                started,
            } if version == VERSION && build == BUILD_ID => {
                c.pid = pid;
                c.ringbuf_bytes = ringbuf_bytes;
                c.max_runs = max_runs;
                c.started = started;
                Ok(Some(c))
            }
            Response::Hello {
                version,
                build,
                pid,
                ..
            } => Err(DaemonError::OtherBuild {
                socket: socket.to_owned(),
                pid,
                theirs: if build.is_empty() {
                    format!("protocol {version}")
                } else {
                    format!("protocol {version}, build {build}")
                },
                ours: format!("protocol {VERSION}, build {BUILD_ID}"),
            }),
            other => Err(c.unexpected(other)),
        }
    }

    /// The daemon's process id (in its own pid namespace).
    pub fn daemon_pid(&self) -> u32 {
        self.pid
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends a request and reads its response; an `Error` response is an error. A daemon
    /// that does not answer within [`CALL_LIMIT`], or is stopped, is an error too.
    pub fn call(&mut self, req: &Request) -> Result<Response, DaemonError> {
        self.call_within(req, CALL_LIMIT)
    }

    /// [`Client::call`] with its own limit.
    pub fn call_within(&mut self, req: &Request, limit: Duration) -> Result<Response, DaemonError> {
        // A daemon that died shows as a broken pipe or a reset as often as an end of file,
        // whichever the request meets first: each is the daemon gone.
        let gone = &self.gone;
        let socket = &self.socket;
        let io = |source: std::io::Error| {
            if matches!(
                source.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) {
                gone.store(true, Ordering::Release);
                DaemonError::Gone {
                    socket: socket.clone(),
                }
            } else {
                DaemonError::Io {
                    socket: socket.clone(),
                    source,
                }
            }
        };
        let mut line = serde_json::to_string(req).expect("requests serialise");
        line.push('\n');
        if let Err(e) = self.stream.write_all(line.as_bytes()) {
            // A daemon that refuses a client says why and hangs up at once, perhaps before the
            // request was written: its answer is still there to read.
            let _ = self.stream.set_read_timeout(Some(POLL));
            let mut said = String::new();
            if self.reader.read_line(&mut said).is_ok()
                && let Ok(Response::Error { message }) =
                    aet_monitor::daemon::protocol::decode::<Response>(&said)
            {
                return Err(DaemonError::Refused {
                    socket: self.socket.clone(),
                    message,
                });
            }
            return Err(io(e));
        }
        // Read in short waits, looking at the daemon between them: a stopped daemon is named
        // at once, a silent one once the limit has passed. The answers owed to requests given
        // up on come first, in order: each is dropped.
        let _ = self.stream.set_read_timeout(Some(POLL));
        let started = std::time::Instant::now();
        let answer = loop {
            match self.reader.read_until(b'\n', &mut self.partial) {
                Ok(0) => {
                    self.gone.store(true, Ordering::Release);
                    return Err(DaemonError::Gone {
                        socket: self.socket.clone(),
                    });
                }
                Ok(_) if self.partial.last() != Some(&b'\n') => {}
                Ok(_) => {
                    let line = std::mem::take(&mut self.partial);
                    if self.owed > 0 {
                        self.owed -= 1;
                        continue;
                    }
                    break line;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    let why = if aet_kernel::procfs::stopped(self.pid) {
                        Some("is stopped (SIGSTOP or a debugger)".to_owned())
                    } else if started.elapsed() >= limit {
                        Some(format!("did not answer within {} s", limit.as_secs()))
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        // Its answer may still come: the next request skips it.
                        self.owed += 1;
                        return Err(DaemonError::Unresponsive {
                            socket: self.socket.clone(),
                            pid: self.pid,
                            why,
                        });
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        };
        let answer = String::from_utf8_lossy(&answer);
        match aet_monitor::daemon::protocol::decode::<Response>(&answer) {
            Ok(Response::Error { message }) => Err(DaemonError::Refused {
                socket: self.socket.clone(),
                message,
            }),
            Ok(r) => Ok(r),
            Err(e) => Err(DaemonError::Protocol {
                socket: self.socket.clone(),
                message: format!("bad response: {e}"),
            }),
        }
    }

    /// An error for a response that does not answer the request.
    pub fn unexpected(&self, r: Response) -> DaemonError {
        DaemonError::Protocol {
            socket: self.socket.clone(),
            message: format!("unexpected response {r:?}"),
        }
    }

    /// Watches the connection on a thread of its own: when the daemon hangs up (it died),
    /// `gone` is set and `on_gone` runs once.
    pub fn watch(&self, on_gone: impl FnOnce() + Send + 'static) -> Result<(), DaemonError> {
        let own = self.stream.try_clone().map_err(|source| DaemonError::Io {
            socket: self.socket.clone(),
            source,
        })?;
        let gone = self.gone.clone();
        let closing = self.closing.clone();
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd as _;
            loop {
                if closing.load(Ordering::Acquire) {
                    return;
                }
                let mut pfd = libc::pollfd {
                    fd: own.as_raw_fd(),
                    events: libc::POLLRDHUP,
                    revents: 0,
                };
                // SAFETY: one pollfd of an fd this thread owns.
                let n = unsafe { libc::poll(&mut pfd, 1, 100) };
                if n < 0 {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return;
                }
                if n == 0 {
                    continue;
                }
                if pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
                    if !closing.load(Ordering::Acquire) {
                        gone.store(true, Ordering::Release);
                        on_gone();
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Ok(())
    }

    /// Has the daemon hung up?
    pub fn gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The conversation is ending: a hang-up from now on is not a death.
    pub fn closing(&self) {
        self.closing.store(true, Ordering::Release);
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Release);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use std::{io::Write as _, os::unix::net::UnixListener};

    use super::*;

    fn line(r: &Response) -> Vec<u8> {
        let mut l = serde_json::to_string(r).unwrap();
        l.push('\n');
        l.into_bytes()
    }

    /// A daemon that answers a request after the client gave up on it (in two pieces, the
    /// first before the limit): the next request gets its own answer, never the late one.
    #[test]
    fn a_late_answer_is_not_taken_for_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("aet.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let daemon = std::thread::spawn(move || {
            let (mut out, _) = listener.accept().unwrap();
            let mut lines = BufReader::new(out.try_clone().unwrap()).lines();
            lines.next().unwrap().unwrap();
            out.write_all(&line(&Response::Hello {
                version: VERSION,
                build: BUILD_ID.into(),
                pid: std::process::id(),
                ringbuf_bytes: 1 << 20,
                max_runs: 4,
                started: "manual".into(),
            }))
            .unwrap();
            lines.next().unwrap().unwrap();
            let late = line(&Response::Health {
                write_error: Some("late".into()),
            });
            out.write_all(&late[..5]).unwrap();
            std::thread::sleep(Duration::from_millis(1700));
            out.write_all(&late[5..]).unwrap();
            lines.next().unwrap().unwrap();
            out.write_all(&line(&Response::Done)).unwrap();
        });
        let mut c = Client::connect(&socket)
            .unwrap()
            .expect("the daemon listens");
        let e = c
            .call_within(&Request::Health, Duration::from_secs(1))
            .unwrap_err();
        assert!(
            matches!(e, DaemonError::Unresponsive { .. }),
            "{e} (expected: did not answer)"
        );
        match c.call(&Request::Tracked).unwrap() {
            Response::Done => {}
            other => panic!("the late answer was taken for the next: {other:?}"),
        }
        daemon.join().unwrap();
    }
}
