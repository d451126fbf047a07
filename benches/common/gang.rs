//! Kept-alive HTTP clients that split batches of `POST` requests between them.

use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::scenario::Clients;
use super::{ORDER_BODY, client};

/// `size` clients, each on its own kept-alive connection, each sending
/// [`ORDER_BODY`] to one URL as many times as its share of a batch says.
pub struct Gang {
    orders: Vec<mpsc::Sender<u64>>,
    done: mpsc::Receiver<u64>,
    clients: Vec<JoinHandle<()>>,
}

impl Gang {
    /// Starts `size` clients posting to `url`, each request giving up after `timeout`.
    pub fn start(url: &str, size: usize, timeout: Duration) -> Gang {
        let (done_tx, done) = mpsc::channel();
        let (orders, clients) = (0..size)
            .map(|i| {
                let (tx, rx) = mpsc::channel::<u64>();
                let (done_tx, url) = (done_tx.clone(), url.to_owned());
                let join = thread::Builder::new()
                    .name(format!("http-client-{i}"))
                    .spawn(move || post_batches(&url, timeout, &rx, &done_tx))
                    .expect("spawn an http client");
                (tx, join)
            })
            .unzip();
        Gang { orders, done, clients }
    }

    /// Sends `total` requests split across the clients; returns the wall time and the
    /// count of answers that were not `200` (errors included).
    pub fn run(&self, total: u64) -> (Duration, u64) {
        let size = self.orders.len() as u64;
        let began = Instant::now();
        for (i, tx) in self.orders.iter().enumerate() {
            let share = total / size + u64::from((i as u64) < total % size);
            tx.send(share).expect("an http client is gone");
        }
        let not_ok = (0..size).map(|_| self.done.recv().expect("an http client is gone")).sum();
        (began.elapsed(), not_ok)
    }

    /// Ends every client and joins it.
    pub fn stop(self) {
        drop(self.orders);
        for client in self.clients {
            client.join().expect("an http client panicked");
        }
    }
}

/// One client of a gang: for each batch it is given, that many posts, then the
/// count of answers that were not `200`. Ends when the gang drops its sender.
fn post_batches(url: &str, timeout: Duration, batches: &mpsc::Receiver<u64>, done: &mpsc::Sender<u64>) {
    let agent = client(timeout);
    for batch in batches {
        let not_ok = (0..batch)
            .filter(|_| !agent.post(url).send(ORDER_BODY).is_ok_and(|r| r.status().as_u16() == 200))
            .count();
        if done.send(not_ok as u64).is_err() {
            return;
        }
    }
}

impl Clients for Gang {
    /// Nothing to tell: between batches the clients only wait for the next one.
    fn signal_stop(&self) {}

    fn join(self, _label: &str) {
        self.stop();
    }
}
