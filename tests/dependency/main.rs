//! The dependency: the call path, budgets, hang detection, detached calls, reconfiguration, the vocabulary, config files, the capacity rule and admission, against real loopback providers.
//!
//! One test binary for the area; each file is a module, with the shared
//! `tests/support` helpers declared here once.

#[path = "../support/mod.rs"]
mod support;

mod admission;
mod brownout_line;
mod budget;
mod burst;
mod caller;
mod cancel;
mod capacity;
mod config_file;
mod config_props;
mod config_section;
mod config_shape;
mod deadline;
mod dependency;
mod detached;
mod fanout;
mod hang;
mod hedge;
mod kinds;
mod priority;
mod reconfigure;
mod refusal_log;
mod stuck;
mod throttle;
mod vocabulary;
