//! The engine's end of a request's event stream.

use std::sync::Arc;

use kiln_core::StreamEvent;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;

/// Sends a request's events; dropping it (the request ended, however it
/// ended) wakes a reader waiting in [`crate::RequestStream::ended`]. A
/// reader that gathers events for a while can therefore sleep without being
/// woken by every token and still see the end at once.
pub(crate) struct EventTx {
    tx: UnboundedSender<StreamEvent>,
    ended: Arc<Notify>,
}

impl EventTx {
    pub(crate) fn new(tx: UnboundedSender<StreamEvent>, ended: Arc<Notify>) -> Self {
        Self { tx, ended }
    }

    /// Sends one event; an error means the reader is gone.
    // The error hands the event back (tokio's type); callers drop it.
    #[allow(clippy::result_large_err)]
    pub(crate) fn send(&self, ev: StreamEvent) -> Result<(), tokio::sync::mpsc::error::SendError<StreamEvent>> {
        self.tx.send(ev)
    }

    /// Whether the reader is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Drop for EventTx {
    fn drop(&mut self) {
        // Stores a permit when nobody waits yet, so a later wait returns at once.
        self.ended.notify_one();
    }
}
