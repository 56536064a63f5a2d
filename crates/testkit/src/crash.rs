//! Shared parts of the kill -9 tests: the child writers' engine
//! configuration, and running a child until a SIGKILL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use storage::{Config, SyncMode};

/// The writers' engine: fsync on commit; small journal files and checkpoint
/// trigger, so kills also land inside checkpoints and journal rotations; a
/// cache smaller than the data, so eviction writes and drops pages throughout.
pub fn writer_config() -> Config {
    Config {
        sync_mode: SyncMode::Fsync,
        checkpoint_journal_bytes: 256 * 1024,
        journal_file_max_bytes: 128 * 1024,
        cache_size_bytes: 256 * 1024,
        cache_pinned_max_percent: 100,
        // Punch often, so kills land around punched blocks.
        punch_every_blocks: 4,
        ..Config::default()
    }
}

/// Any panic, on any thread, ends a child writer so the parent sees it.
pub fn abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
}

/// Start `child` with its stdout piped, let it run for `run`, SIGKILL it,
/// and return what followed `ack ` on each line it printed. Panics if the
/// child ended on its own.
pub fn run_then_kill(mut child: Command, run: Duration, what: &str) -> Vec<String> {
    let mut child = child.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| l.strip_prefix("ack ").map(str::to_string))
            .collect::<Vec<_>>()
    });
    std::thread::sleep(run);
    if let Some(status) = child.try_wait().unwrap() {
        panic!("{what}: the writer exited on its own: {status}");
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    reader.join().unwrap()
}

/// Whether a child killed in `dir` died during the engine's very first
/// open, before its root file was written (initialization fsyncs several
/// files): nothing can have been committed, and the next open initializes
/// again (it refuses to when journal files exist without a root), so there
/// is nothing to verify yet.
pub fn killed_before_first_root(dir: &std::path::Path) -> bool {
    !dir.join(storage::engine::ROOT_FILE).exists()
}
