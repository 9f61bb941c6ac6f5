//! The job broker (`ninetrix job-broker`, hidden): the one process of a pool on one host that
//! creates, starts, inspects, reads, waits for and kills background-job containers for its
//! runners, which never hold the Docker socket. Its configuration (`config`) is written by `up`;
//! the wire types between it and the runners are `ninetrix_proto::jobs`.

pub(crate) mod config;
