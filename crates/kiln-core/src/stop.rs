//! stop (wip)
