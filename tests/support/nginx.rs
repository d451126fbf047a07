//! Real nginx on loopback in front of a server, with the checkout example's
//! `nginx.conf` under a temporary prefix (pid, logs, temporary files), in the
//! foreground and one process (`daemon off; master_process off;`).
//!
//! Included by path (`#[path = "support/nginx.rs"] mod nginx;`).
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether an `nginx` binary is on the `PATH` (or in `/usr/sbin`).
pub fn installed() -> bool {
    binary().is_some()
}

fn binary() -> Option<PathBuf> {
    ["nginx", "/usr/sbin/nginx"].into_iter().map(PathBuf::from).find(|b| {
        Command::new(b)
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A running nginx. Dropping it stops the process and removes its prefix.
pub struct Nginx {
    child: Child,
    /// Where nginx listens.
    pub addr: SocketAddr,
    prefix: PathBuf,
}

impl Nginx {
    /// Starts nginx forwarding to `upstream`, on a free loopback port, and waits
    /// (at most 10 s) until it accepts connections.
    pub fn start(upstream: SocketAddr) -> Nginx {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let prefix = std::env::temp_dir().join(format!("watertight-nginx-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(prefix.join("logs")).expect("create the nginx prefix");
        std::fs::create_dir_all(prefix.join("tmp")).expect("create the nginx prefix");
        // A free port: bind, read, release (nginx binds it a moment later).
        let addr =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port");
        let recipe = include_str!("../../examples/checkout/nginx.conf");
        assert!(recipe.contains("listen 127.0.0.1:8000;") && recipe.contains("server 127.0.0.1:8080;"));
        let conf = recipe
            .replace("listen 127.0.0.1:8000;", &format!("listen {addr};"))
            .replace("server 127.0.0.1:8080;", &format!("server {upstream};"));
        let conf_path = prefix.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let child = Command::new(binary().expect("nginx is installed"))
            .arg("-p")
            .arg(&prefix)
            .args(["-e", "logs/error.log", "-c"])
            .arg(&conf_path)
            .args(["-g", "daemon off; master_process off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nginx");
        let mut nginx = Nginx { child, addr, prefix };
        let give_up = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited ({status}): {}", nginx.error_log());
            }
            assert!(Instant::now() < give_up, "nginx did not listen within 10 s: {}", nginx.error_log());
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    /// nginx's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.prefix.join("logs/error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.prefix);
    }
}
