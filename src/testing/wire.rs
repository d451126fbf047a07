//! Just enough HTTP/1.1 over `std::net`: one request read, one answer written.

use std::io::{self, BufRead, BufReader, Read};
use std::net::TcpStream;

use super::{Call, MAX_REQUEST};

/// Reads one request: request line, headers, and a `Content-Length` or chunked body.
pub(super) fn read_call(stream: &TcpStream) -> io::Result<Call> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let mut reader = BufReader::new(stream.take(MAX_REQUEST));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (Some(method), Some(url)) = (words.next(), words.next()) else {
        return Err(bad("no request line"));
    };
    let (method, url) = (method.to_owned(), url.to_owned());
    let (mut length, mut chunked) = (0, false);
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("headers cut short"));
        }
        let Some((name, value)) = line.split_once(':') else { break };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().map_err(|_| bad("content-length"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16).map_err(|_| bad("chunk size"))?;
            let mut chunk = vec![0; size + 2]; // the data and its CRLF
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..size]);
            if size == 0 {
                break;
            }
        }
    } else {
        reader.take(length).read_to_end(&mut body)?;
    }
    Ok(Call { method, url, body: String::from_utf8_lossy(&body).into_owned() })
}

pub(super) fn http_response(status: u16, body: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    };
    let kind = if body.starts_with('{') || body.starts_with('[') {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
