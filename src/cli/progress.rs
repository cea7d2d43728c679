//! Progress bars (indicatif, on stderr): an operation's processed/total with its phase,
//! rate and ETA; a transfer's bytes. Drawn only for a person: not with `--json`, not
//! when stdout is not a terminal (a script reading it).

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use context_jobs::operation::view::OperationView;

/// Whether bars are drawn at all.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

fn style(template: &str) -> ProgressStyle {
    // The templates are constants of this file; a typo would show in every test run.
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
        // Items per second, whole (indicatif's `{per_sec}` prints four decimals).
        .with_key("rate", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.0}/s", state.per_sec());
        })
}

/// An operation's bar (or nothing).
pub struct OperationBar {
    bar: Option<ProgressBar>,
    counted: bool,
}

impl OperationBar {
    pub fn new(show: bool, id: &str) -> Self {
        let bar = show.then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_prefix(id.to_string());
            bar.set_style(style("{spinner} {prefix} {msg}"));
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self { bar, counted: false }
    }

    /// Show `op` as it is now.
    pub fn update(&mut self, op: &OperationView) {
        let Some(bar) = &self.bar else { return };
        let o = &op.operation;
        if o.total > 0 {
            if !self.counted {
                self.counted = true;
                bar.set_style(style("{spinner} {prefix} [{bar:30}] {pos}/{len} {msg} · {rate} · eta {eta}"));
            }
            bar.set_length(o.total);
        }
        bar.set_position(o.processed);
        bar.set_message(format!("{} · {}", o.state.as_str(), o.phase));
    }

    /// Take the bar off the screen (the final state is printed after).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A transfer's bar by bytes (or nothing), starting at `done` of `total`.
pub fn bytes(show: bool, what: &str, done: u64, total: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_prefix(what.to_string());
    bar.set_style(style("{prefix} [{bar:30}] {bytes}/{total_bytes} · {bytes_per_sec} · eta {eta}"));
    bar.set_position(done);
    bar.reset_eta();
    bar
}
