//! Arbitrary requests against the checkout example: no input makes a handler
//! panic, every error the application gives is a JSON `{"code", "message"}`,
//! and the server keeps answering.
//!
//! The example's request parsing lives in the binary (`examples/checkout/routes.rs`),
//! so it is driven from outside, as any client would: the real binary on a free
//! loopback port, raw HTTP/1.1 over `std::net`, with methods, targets, headers,
//! framing (`Content-Length` exact, short, long, absent, not a number; chunked,
//! broken chunked) and bodies (orders with hostile field values, deep nesting,
//! random bytes) drawn by proptest. 500 requests per run, 5 s each at most.
//!
//! Declared body lengths stay at or below 1 MiB here; `tests/server/edge.rs` sends
//! the larger ones (a body declared as 1,000,000,000,000 bytes gets `413` from
//! the guard, and the server lives).
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus"))]

use crate::checkout_bin;

use std::sync::Mutex;
use std::time::Duration;

use checkout_bin::{Answer, Checkout};
use proptest::prelude::*;

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
enum Framing {
    /// No length, no chunking.
    None,
    /// `Content-Length` equal to the body.
    Exact,
    /// `Content-Length` that many bytes short of the body.
    Short(usize),
    /// `Content-Length` that many bytes more than the body (which never comes).
    Long(usize),
    /// A `Content-Length` that is not a number.
    Junk(String),
    /// `Transfer-Encoding: chunked`, encoded properly.
    Chunked,
    /// `Transfer-Encoding: chunked` with a bad chunk size line.
    BrokenChunked(String),
}

#[derive(Debug, Clone)]
struct RawRequest {
    method: String,
    target: String,
    user: Option<String>,
    headers: Vec<(String, String)>,
    framing: Framing,
    body: Vec<u8>,
}

impl RawRequest {
    fn bytes(&self) -> Vec<u8> {
        let mut head =
            format!("{} {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", self.method, self.target);
        if let Some(user) = &self.user {
            head.push_str(&format!("X-User-Id: {user}\r\n"));
        }
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let body = match &self.framing {
            Framing::None => self.body.clone(),
            Framing::Exact => {
                head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
                self.body.clone()
            }
            Framing::Short(n) => {
                head.push_str(&format!("Content-Length: {}\r\n", self.body.len().saturating_sub(*n)));
                self.body.clone()
            }
            Framing::Long(n) => {
                head.push_str(&format!("Content-Length: {}\r\n", self.body.len() + n));
                self.body.clone()
            }
            Framing::Junk(v) => {
                head.push_str(&format!("Content-Length: {v}\r\n"));
                self.body.clone()
            }
            Framing::Chunked | Framing::BrokenChunked(_) => {
                head.push_str("Transfer-Encoding: chunked\r\n");
                let mut b = Vec::new();
                for chunk in self.body.chunks(7) {
                    b.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    b.extend_from_slice(chunk);
                    b.extend_from_slice(b"\r\n");
                }
                if let Framing::BrokenChunked(line) = &self.framing {
                    b.extend_from_slice(line.as_bytes());
                    b.extend_from_slice(b"\r\n");
                }
                b.extend_from_slice(b"0\r\n\r\n");
                b
            }
        };
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&body);
        bytes
    }
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]).prop_map(String::from),
        1 => "[A-Z]{1,10}",
        1 => "[a-z!#$%&'*+.^_`|~-]{1,6}",
    ]
}

fn target(order: String) -> impl Strategy<Value = String> {
    let known = vec![
        "/checkout".to_owned(),
        format!("/orders/{order}"),
        "/orders/".to_owned(),
        "/orders/ord-".to_owned(),
        "/orders/ord-18446744073709551616".to_owned(),
        "/orders/ord--1".to_owned(),
        "/orders/%ff%00".to_owned(),
        "/me".to_owned(),
        "/health".to_owned(),
        "/circuits".to_owned(),
        "/metrics".to_owned(),
        "/_faults".to_owned(),
        "/_faults/nope".to_owned(),
        "/_faults/fraud/extra".to_owned(),
        "//checkout".to_owned(),
        "/checkout?x=1#frag".to_owned(),
        "*".to_owned(),
        "http://example.com/checkout".to_owned(),
    ];
    prop_oneof![
        6 => prop::sample::select(known),
        2 => "/[!-~]{0,60}",
        1 => "/(orders|checkout|me|_faults)/[!-~]{0,40}",
        1 => "/[a-z/]{0,4000}",
    ]
}

fn user() -> impl Strategy<Value = Option<String>> {
    proptest::option::weighted(
        0.8,
        prop_oneof![
            8 => Just("alice".to_owned()),
            1 => Just("mallory".to_owned()),
            1 => Just(String::new()),
            1 => "[A-Za-z0-9._@-]{1,80}",
            1 => "[ -~]{0,100}",
            1 => Just("a".repeat(5000)),
        ],
    )
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let header = prop_oneof![
        4 => Just(("Content-Type".to_owned(), "application/json".to_owned())),
        1 => Just(("Content-Type".to_owned(), "text/plain; charset=latin1".to_owned())),
        1 => Just(("Expect".to_owned(), "100-continue".to_owned())),
        1 => Just(("Expect".to_owned(), "the-unexpected".to_owned())),
        1 => Just(("Connection".to_owned(), "keep-alive, upgrade".to_owned())),
        2 => Just(("Accept".to_owned(), "*/*".to_owned())),
        4 => ("[A-Za-z][A-Za-z0-9-]{0,20}", "[ -~]{0,80}"),
    ];
    prop::collection::vec(header, 0..3)
}

/// JSON numbers as text, some of which serde refuses or maps to infinity.
fn json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "-0",
            "-1",
            "1e308",
            "1e309",
            "-1e309",
            "4.9e-324",
            "NaN",
            "Infinity",
            "null",
            "\"42\"",
            "true",
            "[]",
            "{}",
            "42",
            "1000.01",
            "18446744073709551616",
        ])
        .prop_map(String::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| f.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
    ]
}

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"\"".to_owned()),
        Just(format!("\"{}\"", "c".repeat(129))),
        Just("\"\\ud800\"".to_owned()),
        Just("\"\\u0000\"".to_owned()),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("null".to_owned()),
        Just("7".to_owned()),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (json_string(), json_number(), any::<bool>()).prop_map(|(c, a, extra)| {
            let extra = if extra { r#","extra":{"nested":[1,2,3]}"# } else { "" };
            format!(r#"{{"customer_id":{c},"amount":{a}{extra}}}"#).into_bytes()
        }),
        1 => Just(br#"{"customer_id":"c-1","amount":42}"#.to_vec()),
        1 => (1usize..3000).prop_map(|depth| format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()),
        1 => Just(format!(r#"{{"customer_id":"c","amount":1,"pad":"{}"}}"#, "x".repeat(70_000)).into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..300),
        1 => "[ -~]{0,200}".prop_map(String::into_bytes),
        1 => Just(Vec::new()),
    ]
}

fn framing() -> impl Strategy<Value = Framing> {
    prop_oneof![
        6 => Just(Framing::Exact),
        1 => Just(Framing::None),
        1 => (1usize..50).prop_map(Framing::Short),
        1 => prop_oneof![1usize..100, Just(1 << 20)].prop_map(Framing::Long),
        1 => prop::sample::select(vec!["-1", "abc", "1e3", "0x10", " 12", "99999999999999999999999"])
            .prop_map(|v| Framing::Junk(v.to_owned())),
        2 => Just(Framing::Chunked),
        1 => prop::sample::select(vec!["zz", "-5", "fffffffffffffffffffff", ""]).prop_map(|l| Framing::BrokenChunked(l.to_owned())),
    ]
}

/// Three in four requests are checkouts whose head is mostly right, so that the
/// body gets parsed; the rest are anything.
fn raw_request(order: String) -> impl Strategy<Value = RawRequest> {
    let checkout = (user(), headers(), framing(), body()).prop_map(|(user, mut headers, framing, body)| {
        headers.insert(0, ("Content-Type".to_owned(), "application/json".to_owned()));
        RawRequest { method: "POST".to_owned(), target: "/checkout".to_owned(), user, headers, framing, body }
    });
    let anything = (method(), target(order), user(), headers(), framing(), body()).prop_map(
        |(method, target, user, headers, framing, body)| RawRequest {
            method,
            target,
            user,
            headers,
            framing,
            body,
        },
    );
    prop_oneof![3 => checkout, 1 => anything]
}

/// What may come back: an application answer (JSON, and `{"code", ...}` for
/// an error, never a 500), one of tiny_http's own refusals (empty body), or
/// nothing when tiny_http drops a request it could not read whole. An answer to
/// `HEAD` has a head only.
fn check(request: &RawRequest, answer: &Result<Answer, String>) -> Result<(), TestCaseError> {
    let Ok(a) = answer else { return Ok(()) };
    prop_assert_ne!(a.status, 500, "a handler failed: {:?}", a);
    let json =
        request.method != "HEAD" && a.head.to_ascii_lowercase().contains("content-type: application/json");
    if json {
        let value: serde_json::Value = serde_json::from_str(&a.body)
            .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {a:?}")))?;
        // 402 is an order the fraud check rejected: an order, not an error.
        if a.status >= 400 && a.status != 402 {
            prop_assert!(value["code"].is_string() && value["message"].is_string(), "{a:?}");
        }
    } else if a.status >= 400 && request.method != "HEAD" {
        // tiny_http's own answers: bad request line or header, timeout,
        // expectation failed, version not supported.
        prop_assert!(matches!(a.status, 400 | 408 | 417 | 505), "{a:?}");
    }
    Ok(())
}

#[test]
fn arbitrary_requests_get_clear_answers_and_the_server_survives() {
    // Owned by the test, so the process is killed when the test ends, passed or
    // failed (a `static` would never be dropped and would outlive the test).
    let server = Mutex::new(Checkout::start(&[]));
    let addr = server.lock().unwrap().addr;
    let order = checkout_bin::place_order(addr, "alice").expect("an order");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 500,
        // The cases talk to one long-lived process; a failure is replayed from
        // the printed input, not from a file.
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    // Answers by status (0: none), to show what the run covered.
    let seen = Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    let outcome = runner.run(&raw_request(order.clone()), |request| {
        let mut server = server.lock().unwrap();
        let answer = checkout_bin::exchange(addr, &request.bytes(), TIMEOUT);
        *seen.lock().unwrap().entry(answer.as_ref().map_or(0, |a| a.status)).or_default() += 1;
        prop_assert!(server.exited().is_none(), "the server died on {request:?}:\n{}", server.stderr());
        check(&request, &answer)?;
        Ok(())
    });
    println!("checkout input: answers by status (0 = none): {:?}", seen.lock().unwrap());
    let server = server.into_inner().unwrap();
    if let Err(e) = outcome {
        panic!("{e}\nserver stderr:\n{}", server.stderr());
    }
    // Still serving, with the order still there, and no panic in its log.
    let health = checkout_bin::get(addr, "/health", TIMEOUT).expect("/health answers");
    assert_eq!(health.status, 200, "{health:?}");
    let found = checkout_bin::get(addr, &format!("/orders/{order}"), TIMEOUT).expect("/orders answers");
    assert_eq!(found.status, 200, "{found:?}");
    assert!(!server.stderr().contains("panicked"), "a panic in the log:\n{}", server.stderr());
}
