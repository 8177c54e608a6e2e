//! The chat page at `/`: plain HTML, CSS and JavaScript embedded in the
//! binary (no CDN, no build step), so it works offline. It talks to the
//! server's own OpenAI routes and keeps conversations in the browser
//! (docs/web.md).

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::state::SharedState;

const INDEX_HTML: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const MARKDOWN_JS: &str = include_str!("../web/markdown.js");
const STYLE_CSS: &str = include_str!("../web/style.css");

/// The page's paths: served without the API key, since they are the same
/// for everyone; the page asks for the key itself.
pub const PATHS: [&str; 4] = ["/", "/web/app.js", "/web/markdown.js", "/web/style.css"];

/// Scripts and styles come only from this server; nothing is fetched
/// elsewhere, and the page cannot be framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let h = resp.headers_mut();
    // The assets change with the binary: revalidate rather than cache forever.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}

async fn index() -> Response {
    let mut resp = asset(INDEX_HTML, "text/html; charset=utf-8");
    resp.headers_mut().insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    resp
}

async fn app_js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

async fn markdown_js() -> Response {
    asset(MARKDOWN_JS, "text/javascript; charset=utf-8")
}

async fn style_css() -> Response {
    asset(STYLE_CSS, "text/css; charset=utf-8")
}

/// The page's routes.
pub fn routes() -> Router<SharedState> {
    let [root, app, markdown, style] = PATHS;
    Router::new()
        .route(root, get(index))
        .route(app, get(app_js))
        .route(markdown, get(markdown_js))
        .route(style, get(style_css))
}

/// Whether `path` is the page or one of its assets (no API key needed).
pub fn is_page(path: &str) -> bool {
    PATHS.contains(&path)
}
