//! `http_request`: one HTTP request with a size cap on the response body.

use serde_json::Value;

use super::{ToolContext, ToolOutput};

const MAX_BODY: usize = 256 * 1024;

pub(crate) async fn request(ctx: &ToolContext, args: &Value) -> ToolOutput {
    let Some(url) = args.get("url").and_then(Value::as_str) else {
        return ToolOutput::error("missing `url`");
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return ToolOutput::error(format!("`{url}` is not an http(s) URL"));
    }
    let method = args
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return ToolOutput::error(format!("`{method}` is not an HTTP method"));
    };
    let mut req = ctx.http.request(method, url).timeout(ctx.timeout);
    if let Some(headers) = args.get("headers").and_then(Value::as_object) {
        for (k, v) in headers {
            if let Some(v) = v.as_str() {
                req = req.header(k, v);
            }
        }
    }
    if let Some(body) = args.get("body").and_then(Value::as_str) {
        req = req.body(body.to_string());
    }
    let mut resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(format!("request failed: {e}")),
    };
    let status = resp.status();
    let mut body = Vec::new();
    let mut truncated = false;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_BODY.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if chunk.len() > room {
                    truncated = true;
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => return ToolOutput::error(format!("reading the response failed: {e}")),
        }
    }
    let mut text = format!(
        "HTTP {}\n\n{}",
        status.as_u16(),
        String::from_utf8_lossy(&body)
    );
    if truncated {
        text.push_str(&format!("\n[body cut at {MAX_BODY} bytes]"));
    }
    ToolOutput {
        content: text,
        is_error: status.is_client_error() || status.is_server_error(),
    }
}
