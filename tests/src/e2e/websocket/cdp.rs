//! A headless Chromium driven over the Chrome DevTools Protocol: started once per test binary
//! (`chromium --headless=new --remote-debugging-port=0`), its DevTools URL read from stderr;
//! each test opens its own page in its own browser context (its own localStorage).
//!
//! The browser runs under a `sh` watchdog that kills it (and removes its profile) when the
//! test binary exits: the watchdog waits on a pipe only the test process holds open.

use std::process::{ChildStdin, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long the browser gets to print its DevTools URL.
const START: Duration = Duration::from_secs(30);
/// How long one DevTools call may take.
const CALL: Duration = Duration::from_secs(30);
/// Pause between two checks of a page condition.
const POLL: Duration = Duration::from_millis(50);

/// The shared browser: its DevTools URL and the watchdog's stdin (closed, so the browser
/// killed, when the test binary exits).
static BROWSER: Mutex<Option<(String, ChildStdin)>> = Mutex::new(None);

/// Returns the DevTools URL of the shared browser, starting it on first use.
fn browser() -> anyhow::Result<String> {
    let mut shared = BROWSER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((url, _)) = shared.as_ref() {
        return Ok(url.clone());
    }
    let chromium = crate::harness::find_server_binary("chromium", "NANOBOT_CHROMIUM").context(
        "chromium is required by the web chat test: run `make deps-test` (scripts/deps.sh browser)",
    )?;
    let profile = std::env::temp_dir().join(format!("nanobot-chromium-{}", std::process::id()));
    let script = r#"browser="$1"; profile="$2"; shift 2
"$browser" "$@" --user-data-dir="$profile" </dev/null >/dev/null &
pid=$!
cat >/dev/null
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$profile""#;
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&chromium)
        .arg(&profile)
        .args([
            "--headless=new",
            "--remote-debugging-port=0",
            "--no-sandbox",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "about:blank",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {}", chromium.display()))?;
    let stdin = child.stdin.take().context("watchdog stdin")?;
    let stderr = child.stderr.take().context("browser stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut sent = false;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(url) = line.split_whitespace().find(|w| w.starts_with("ws://")) {
                let _ = tx.send(url.to_string());
                sent = true;
            }
        }
    });
    let url = rx
        .recv_timeout(START)
        .context("chromium printed no DevTools URL")?;
    *shared = Some((url.clone(), stdin));
    Ok(url)
}

/// One DevTools connection.
struct Cdp {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Cdp {
    async fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Value> {
        self.next += 1;
        let id = self.next;
        let mut request = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            request["sessionId"] = json!(session);
        }
        self.socket.send(Message::text(request.to_string())).await?;
        let deadline = tokio::time::Instant::now() + CALL;
        loop {
            let next = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .with_context(|| format!("{method} unanswered"))?;
            let Some(Ok(Message::Text(text))) = next else {
                match next {
                    Some(Ok(_)) => continue,
                    other => anyhow::bail!("devtools connection ended: {other:?}"),
                }
            };
            let reply: Value = serde_json::from_str(&text)?;
            if reply["id"] != id {
                continue; // an event
            }
            if let Some(error) = reply.get("error") {
                anyhow::bail!("{method} failed: {error}");
            }
            return Ok(reply["result"].clone());
        }
    }
}

/// A page of the shared browser in its own browser context.
pub(crate) struct Page {
    cdp: Cdp,
    session: String,
    context: String,
}

impl Page {
    /// Opens `url` in a fresh browser context.
    pub(crate) async fn open(url: &str) -> anyhow::Result<Self> {
        let devtools = tokio::task::spawn_blocking(browser).await??;
        let (socket, _) = tokio_tungstenite::connect_async(&devtools)
            .await
            .context("connect to the browser's DevTools")?;
        let mut cdp = Cdp { socket, next: 0 };
        let context = cdp
            .call(None, "Target.createBrowserContext", json!({}))
            .await?["browserContextId"]
            .as_str()
            .context("browserContextId")?
            .to_string();
        let target = cdp
            .call(
                None,
                "Target.createTarget",
                json!({"url": "about:blank", "browserContextId": context}),
            )
            .await?["targetId"]
            .as_str()
            .context("targetId")?
            .to_string();
        let session = cdp
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .await?["sessionId"]
            .as_str()
            .context("sessionId")?
            .to_string();
        let mut page = Self {
            cdp,
            session,
            context,
        };
        page.call("Page.enable", json!({})).await?;
        page.call("Page.navigate", json!({"url": url})).await?;
        Ok(page)
    }

    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.cdp.call(Some(&self.session), method, params).await
    }

    /// Evaluates `expression` in the page and returns its value.
    pub(crate) async fn eval(&mut self, expression: &str) -> anyhow::Result<Value> {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(exception) = result.get("exceptionDetails") {
            anyhow::bail!("{expression} threw: {exception}");
        }
        Ok(result["result"]["value"].clone())
    }

    /// Waits until `expression` is true in the page (a thrown error counts as not yet).
    pub(crate) async fn wait_for(
        &mut self,
        expression: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(Value::Bool(true)) = self.eval(expression).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let body = self
                    .eval("document.body ? document.body.innerText : ''")
                    .await;
                anyhow::bail!("{expression} not true within {timeout:?}; page shows {body:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Focuses `selector` and types `text` into it as keyboard input.
    pub(crate) async fn type_into(&mut self, selector: &str, text: &str) -> anyhow::Result<()> {
        let focus = format!("document.querySelector({}).focus(); true", json!(selector));
        self.eval(&focus).await?;
        self.call("Input.insertText", json!({"text": text})).await?;
        Ok(())
    }

    /// Clicks the middle of `selector` with the mouse.
    pub(crate) async fn click(&mut self, selector: &str) -> anyhow::Result<()> {
        let rect = format!(
            "(() => {{ const r = document.querySelector({}).getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
            json!(selector)
        );
        let at = self.eval(&rect).await?;
        let (x, y) = (at[0].as_f64().context("x")?, at[1].as_f64().context("y")?);
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )
            .await?;
        }
        Ok(())
    }

    /// Reloads the page.
    pub(crate) async fn reload(&mut self) -> anyhow::Result<()> {
        self.call("Page.reload", json!({})).await?;
        Ok(())
    }

    /// Closes the page's browser context.
    pub(crate) async fn close(mut self) {
        let context = self.context.clone();
        let _ = self
            .cdp
            .call(
                None,
                "Target.disposeBrowserContext",
                json!({"browserContextId": context}),
            )
            .await;
    }
}
