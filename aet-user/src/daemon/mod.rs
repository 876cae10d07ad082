//! The daemon's client side in the `aet` binary: [`client`] (what `aet run`, `aet monitor`
//! and `aet daemon status` say to a running daemon) and [`start`] (a run that finds no daemon
//! starts one). The daemon itself (its protocol, its serving side, the errors both share) is
//! `aet_monitor::daemon`.

pub mod client;
pub mod start;

use std::path::Path;

use aet_monitor::daemon::{
    DaemonError,
    protocol::{Request, Response},
};

/// A daemon's status (`aet daemon status`).
pub fn status(socket: &Path) -> Result<Option<Response>, DaemonError> {
    let Some(mut c) = client::Client::connect(socket)? else {
        return Ok(None);
    };
    let r = c.call(&Request::Status)?;
    c.closing();
    Ok(Some(r))
}
