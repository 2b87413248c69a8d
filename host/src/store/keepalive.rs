//! TCP keepalive on the connections to the database.
//!
//! sqlx opens its sockets itself and offers no hook to set socket options,
//! so after each new connection the broker finds its sockets to the
//! server's port among the process's file descriptors (Linux) and turns
//! keepalive on, with short timers: a pooled connection whose server or
//! path died while it sat idle is then closed by the kernel within
//! seconds, and fails at once instead of at the caller's deadline. (Every
//! call is bounded by `db_timeout_ms` either way; this only makes the
//! failure earlier.) Setting the option on a socket that has it already,
//! or on another socket to that port, is harmless.

use std::time::Duration;

/// Idle time before the first probe.
pub const IDLE: Duration = Duration::from_secs(5);
/// Time between probes.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Unanswered probes before the connection is dropped.
pub const PROBES: u32 = 3;

/// Turns keepalive on for every TCP socket of this process whose peer port
/// is `port`; how many sockets it set.
pub fn apply(port: u16) -> usize {
    sockets_to(port)
        .into_iter()
        .filter(|&fd| enable(fd))
        .count()
}

/// The descriptors of this process's TCP sockets whose peer port is `port`.
#[cfg(target_os = "linux")]
pub fn sockets_to(port: u16) -> Vec<libc::c_int> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<libc::c_int>().ok())
        .filter(|&fd| peer_port(fd) == Some(port))
        .collect()
}

#[cfg(not(target_os = "linux"))]
pub fn sockets_to(_port: u16) -> Vec<i32> {
    Vec::new()
}

/// The peer port of `fd` if it is a connected TCP socket.
#[cfg(target_os = "linux")]
fn peer_port(fd: libc::c_int) -> Option<u16> {
    // SAFETY: `storage` is large enough for any socket address and `len`
    // says so; getpeername fails harmlessly on a descriptor that is not a
    // connected socket (or was closed meanwhile).
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getpeername(fd, (&raw mut storage).cast(), &mut len) != 0 {
            return None;
        }
        match i32::from(storage.ss_family) {
            libc::AF_INET => {
                let addr: &libc::sockaddr_in = &*(&raw const storage).cast();
                Some(u16::from_be(addr.sin_port))
            }
            libc::AF_INET6 => {
                let addr: &libc::sockaddr_in6 = &*(&raw const storage).cast();
                Some(u16::from_be(addr.sin6_port))
            }
            _ => None,
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn enable(_fd: i32) -> bool {
    false
}

#[cfg(target_os = "linux")]
fn enable(fd: libc::c_int) -> bool {
    let secs = |d: Duration| libc::c_int::try_from(d.as_secs()).unwrap_or(libc::c_int::MAX);
    let options = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(IDLE)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(INTERVAL)),
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPCNT,
            libc::c_int::try_from(PROBES).unwrap_or(3),
        ),
    ];
    options.iter().all(|&(level, name, value)| {
        // SAFETY: a plain int option on a socket descriptor.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    })
}

/// Whether keepalive is on for `fd` (for tests).
#[cfg(target_os = "linux")]
pub fn is_on(fd: libc::c_int) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a plain int option read into `value`.
    let ok = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_KEEPALIVE,
            (&raw mut value).cast(),
            &mut len,
        ) == 0
    };
    ok && value != 0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn sockets_to_the_port_get_keepalive_and_others_do_not() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to_server = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let to_other = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!is_on(to_server.as_raw_fd()));
        assert!(apply(server.local_addr().unwrap().port()) >= 1);
        assert!(is_on(to_server.as_raw_fd()));
        assert!(!is_on(to_other.as_raw_fd()));
    }
}
