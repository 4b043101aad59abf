//! Waits that may last long (write-conflict backoff behind an open transaction, a session in
//! use) go through [`wait`], so a caller running on an async executor's worker thread can
//! hand the worker's other tasks to another thread first (the server runs cheap commands on
//! the connection's task and installs tokio's `block_in_place` here for them).

use std::cell::Cell;

/// Runs a blocking closure; installed per thread by the caller that owns the thread.
pub type WaitHook = fn(&mut dyn FnMut());

thread_local! {
    static HOOK: Cell<Option<WaitHook>> = const { Cell::new(None) };
}

/// Installs `hook` on this thread until the guard drops.
pub fn install(hook: WaitHook) -> HookGuard {
    HookGuard(HOOK.with(|h| h.replace(Some(hook))))
}

/// Restores the previous hook when dropped.
pub struct HookGuard(Option<WaitHook>);

impl Drop for HookGuard {
    fn drop(&mut self) {
        HOOK.with(|h| h.set(self.0));
    }
}

/// Runs `f`, which may block, through this thread's hook.
pub fn wait(mut f: impl FnMut()) {
    match HOOK.with(|h| h.get()) {
        Some(hook) => hook(&mut f),
        None => f(),
    }
}
