//! Recorded slurmrestd answers and a server that never stops answering, for the tests of
//! malformed and hostile responses (`tests/hostile_responses.rs`, `tests/bad_input.rs`).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The recorded body of a Slurm 24.11 answer: the `body` of the envelope in
/// `tests/fixtures/24.11/<case>.json`.
pub fn recorded(case: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/24.11")
        .join(format!("{case}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let envelope: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    envelope["body"].clone()
}

/// The recorded body with `mutate` applied, as bytes to serve.
pub fn mutated(case: &str, mutate: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut body = recorded(case);
    mutate(&mut body);
    serde_json::to_vec(&body).unwrap()
}

/// A raw HTTP/1.1 server answering every request with a 200 chunked JSON body that never ends:
/// `head`, then `chunk` forever, `pause` apart (until the client hangs up). Returns its base URL.
pub async fn endless_server(head: &'static [u8], chunk: &'static [u8], pause: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0_u8; 16 * 1024];
                let _ = socket.read(&mut request).await;
                let header = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                              transfer-encoding: chunked\r\n\r\n";
                let frame = |data: &[u8]| {
                    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
                    out.extend_from_slice(data);
                    out.extend_from_slice(b"\r\n");
                    out
                };
                if socket.write_all(header.as_bytes()).await.is_err()
                    || socket.write_all(&frame(head)).await.is_err()
                {
                    return;
                }
                let chunk = frame(chunk);
                // Ends when the client hangs up (write error).
                while socket.write_all(&chunk).await.is_ok() {
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
            });
        }
    });
    format!("http://{address}")
}
