//! Waking asyncio once per engine step, not once per event.
//!
//! A stream's `__anext__` that has to wait creates an asyncio future and a
//! tokio task that awaits the event. Finished tasks queue their results
//! here; the first to find the queue empty takes the GIL and hands all
//! queued results to each event loop in one `call_soon_threadsafe`, so the
//! events of one engine step (one per stream) cost one GIL acquisition and
//! one wake of the loop.

use std::sync::Mutex;

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyList;

use crate::stream::Event;
use crate::to_py;

/// A waiting future and what it gets.
pub(crate) struct Pending {
    pub(crate) event_loop: PyObject,
    pub(crate) future: PyObject,
    pub(crate) result: Result<Option<kiln_bind::Event>, kiln_bind::BindError>,
}

static QUEUE: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static DELIVER: GILOnceCell<PyObject> = GILOnceCell::new();

/// Queues `p`; the task that queues first delivers everything queued by then.
pub(crate) async fn deliver(p: Pending) {
    let first = match QUEUE.lock() {
        Ok(mut q) => {
            q.push(p);
            q.len() == 1
        }
        Err(_) => return,
    };
    if !first {
        return;
    }
    // The other streams' events of this step are arriving now.
    tokio::task::yield_now().await;
    Python::with_gil(|py| {
        let batch = QUEUE.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default();
        if let Err(e) = flush(py, batch) {
            e.write_unraisable(py, None);
        }
    });
}

fn flush(py: Python<'_>, batch: Vec<Pending>) -> PyResult<()> {
    let deliver = DELIVER
        .get_or_try_init(py, || -> PyResult<PyObject> { Ok(wrap_pyfunction!(_deliver, py)?.into_any().unbind()) })?;
    let mut loops: Vec<(PyObject, Bound<'_, PyList>)> = Vec::new();
    for p in batch {
        let (value, is_error) = match p.result {
            Ok(Some(ev)) => (Py::new(py, Event::from(ev))?.into_any(), false),
            Ok(None) => (PyStopAsyncIteration::new_err(()).into_value(py).into_any(), true),
            Err(e) => (to_py(e).into_value(py).into_any(), true),
        };
        let item = (p.future, value, is_error);
        match loops.iter().find(|(l, _)| l.is(&p.event_loop)) {
            Some((_, items)) => items.append(item)?,
            None => {
                let items = PyList::empty(py);
                items.append(item)?;
                loops.push((p.event_loop, items));
            }
        }
    }
    for (event_loop, items) in loops {
        event_loop.call_method1(py, "call_soon_threadsafe", (deliver, items))?;
    }
    Ok(())
}

/// Runs on the event loop: sets each future's result (or exception) unless
/// it was cancelled meanwhile.
#[pyfunction]
fn _deliver(items: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>, bool)>) -> PyResult<()> {
    for (future, value, is_error) in items {
        if future.call_method0("done")?.is_truthy()? {
            continue;
        }
        let method = if is_error { "set_exception" } else { "set_result" };
        future.call_method1(method, (value,))?;
    }
    Ok(())
}

static GET_RUNNING_LOOP: GILOnceCell<PyObject> = GILOnceCell::new();

/// The running event loop (`asyncio.get_running_loop()`).
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let get = GET_RUNNING_LOOP.get_or_try_init(py, || -> PyResult<PyObject> {
        Ok(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
    })?;
    get.bind(py).call0()
}
