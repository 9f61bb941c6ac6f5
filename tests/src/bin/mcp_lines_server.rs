//! A stdio MCP server for the sidecar tests (`tests/tests/mcp_sidecar.rs`), built with rmcp into
//! a static binary so it runs in a `FROM scratch` image — the offline stand-in for a team's own
//! server image. It keeps everything under `--dir` (default `/data`):
//!
//! - `append_line {text, delay?}`: a write — journals the call (with the ledger key from
//!   `_meta`), waits `delay` seconds, appends `text` to `lines.txt`;
//! - `count_lines {text}`: a read (annotated read-only) — how many lines of `lines.txt` are
//!   `text`; the verifier of `append_line`.
//!
//! `journal` has one JSON line per call started, so a test can count what the server saw.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone)]
struct Lines {
    dir: PathBuf,
}

fn schema(v: Value) -> Arc<serde_json::Map<String, Value>> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

impl Lines {
    fn journal(&self, tool: &str, args: &Value, key: Option<&Value>) {
        let entry = json!({"tool": tool, "args": args, "key": key, "pid": std::process::id()});
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("journal"))
        {
            let _ = writeln!(f, "{entry}");
            let _ = f.sync_all();
        }
    }

    fn count(&self, text: &str) -> usize {
        std::fs::read_to_string(self.dir.join("lines.txt"))
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == text)
            .count()
    }
}

impl ServerHandler for Lines {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mcp-lines-server", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let text = json!({"type": "string"});
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "append_line",
                "Append a line of text to lines.txt (after `delay` seconds).",
                schema(json!({"type": "object", "properties": {"text": text, "delay": {"type": "number"}}, "required": ["text"]})),
            )
            .annotate(ToolAnnotations::new().read_only(false).idempotent(false)),
            Tool::new(
                "count_lines",
                "Count the lines of lines.txt that equal a text.",
                schema(json!({"type": "object", "properties": {"text": text}, "required": ["text"]})),
            )
            .annotate(ToolAnnotations::new().read_only(true).idempotent(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let key = context.meta.get("dev.ninetrix/idempotency-key").cloned();
        let text = args["text"].as_str().unwrap_or_default().to_string();
        self.journal(&request.name, &args, key.as_ref());
        let answer = match request.name.as_ref() {
            "append_line" => {
                if let Some(delay) = args["delay"].as_f64().filter(|d| *d > 0.0) {
                    tokio::time::sleep(std::time::Duration::from_secs_f64(delay)).await;
                }
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("lines.txt"))
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                writeln!(f, "{text}")
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                "appended".to_string()
            }
            "count_lines" => format!("{} line(s) equal {text:?}", self.count(&text)),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::from(CallToolResult::success(vec![
            ContentBlock::text(answer),
        ])))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = PathBuf::from("/data");
    while let Some(a) = args.next() {
        if a == "--dir" {
            dir = PathBuf::from(args.next().expect("--dir DIR"));
        }
    }
    std::fs::create_dir_all(&dir).expect("the data directory can be made");
    let service = Lines { dir }
        .serve(rmcp::transport::stdio())
        .await
        .expect("the MCP handshake over stdio");
    let _ = service.waiting().await;
}
