//! The signals of `preread start`: every one is handled and logged, none
//! is fatal without a log line.
//!
//! Owns: which signals the command server watches and what each does:
//! SIGHUP reloads the config file the proxy started from (the diff of
//! `preread reload`, run as one job with its skip-and-retry rules); SIGUSR1
//! has the access-log writer reopen its file (logrotate's `postrotate`);
//! SIGTERM and SIGINT stop softly, a second one at once; SIGQUIT stops at
//! once. Must never: block the command thread, or act on a reload while
//! the proxy is stopping.

use std::io;

use mio::Interest;
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1};
use signal_hook_mio::v1_0::Signals;

use coordinator::Input;

use super::{CommandServer, SIGNALS, StopKind};

impl CommandServer {
    /// Watches the signals of the module doc on the server's poll.
    pub fn watch_signals(&mut self) -> io::Result<()> {
        let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGQUIT])?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        self.signals = Some(signals);
        Ok(())
    }

    pub(super) fn on_signals(&mut self) {
        let received: Vec<i32> = match self.signals.as_mut() {
            Some(signals) => signals.pending().collect(),
            None => Vec::new(),
        };
        for signal in received {
            match signal {
                // The coordinator queues the reload (or logs why not).
                SIGHUP => self.feed(Input::Hangup),
                SIGUSR1 => match &self.access_log {
                    Some(writer) => {
                        log::info!("SIGUSR1: reopening the access log");
                        writer.reopen();
                    }
                    None => log::info!("SIGUSR1: the access log is off, nothing to reopen"),
                },
                SIGQUIT => {
                    log::warn!("SIGQUIT: hard stop");
                    self.feed(Input::Stop(StopKind::Hard));
                }
                _ => self.stop_on_signal(signal),
            }
        }
    }

    fn stop_on_signal(&mut self, signal: i32) {
        match self.coordinator.stopping() {
            None => {
                log::info!("signal {signal}: soft stop (send another to stop at once)");
                self.feed(Input::Stop(StopKind::Soft));
            }
            Some(StopKind::Soft) => {
                log::warn!("signal {signal} during the soft stop: hard stop");
                self.feed(Input::Stop(StopKind::Hard));
            }
            Some(StopKind::Hard) => {}
        }
    }
}
