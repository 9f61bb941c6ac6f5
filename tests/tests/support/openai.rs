//! Pieces of a fake OpenAI Chat Completions server speaking the real streaming wire format
//! (`chat.completion.chunk` SSE events, a usage chunk, `[DONE]`), shared by the tests that put a
//! local stand-in where the model would be.

use serde_json::{Value, json};

/// One `chat.completion.chunk` event.
pub(crate) fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

/// The usage chunk and `[DONE]`.
pub(crate) fn end(prompt: u64, completion: u64) -> String {
    let usage = json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}});
    format!("data: {usage}\n\ndata: [DONE]\n\n")
}

/// A whole streamed answer with `text` and no tool calls.
pub(crate) fn answer_stream(text: &str) -> String {
    [
        chunk(json!({"role": "assistant", "content": text}), None),
        chunk(json!({}), Some("stop")),
        end(60, 3),
    ]
    .concat()
}

/// A streamed answer that calls tool `name` with `args` (its call ID `call_<n>`), finishing with
/// `tool_calls`.
pub(crate) fn tool_call_response(n: usize, name: &str, args: &Value) -> axum::response::Response {
    let call = json!({"tool_calls": [{"index": 0, "id": format!("call_{n}"),
        "type": "function", "function": {"name": name, "arguments": args.to_string()}}]});
    stream_response(
        [
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(call, None),
            chunk(json!({}), Some("tool_calls")),
            end(50, 10),
        ]
        .concat(),
    )
}

/// An HTTP response: a stream with status 200.
pub(crate) fn stream_response(body: String) -> axum::response::Response {
    axum::response::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from(body))
        .unwrap()
}

/// An HTTP response that streams one piece of an answer (`Thinking`) and then nothing until the
/// client goes away; `guard` is dropped then (a test counts an abandoned call, or frees a slot
/// of its stand-in, in its `Drop`).
pub(crate) fn hanging_stream(guard: impl Send + 'static) -> axum::response::Response {
    use futures_util::StreamExt as _;
    let first = chunk(json!({"role": "assistant", "content": "Thinking"}), None);
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(
        futures_util::stream::once(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok(String::new())
        }),
    );
    axum::response::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from_stream(stream))
        .unwrap()
}

/// An HTTP error response with OpenAI's error body.
pub(crate) fn error_response(status: u16, message: &str) -> axum::response::Response {
    axum::response::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string(),
        ))
        .unwrap()
}
