//! The dashboard's files (`/ui`, `src/ui`) as a browser gets them: the page with its
//! security headers, public even when the API needs a credential; every file the page
//! references or a module imports is served with its content type and is the embedded
//! one (and nothing is embedded that nothing loads); an unknown file is a 404 `ApiError`;
//! and no file carries what the Content-Security-Policy or XSS safety forbid (inline
//! handlers, inline scripts or styles, HTML parsed from strings, other origins), and every
//! API path a module names is in the OpenAPI document (no private endpoints). The
//! pages' behaviour in a real browser is tested by `tests/ui/`.

use std::collections::{BTreeSet, VecDeque};

use crate::harness::{Backend, TestApp};
use context_ops::http::openapi::document_json;
use context_ops::ui::{ASSETS, CONTENT_SECURITY_POLICY, UI_PATH, asset, content_type};

/// The string literal starting right after `at` (which ends with its opening quote).
fn literal_after(text: &str, at: usize) -> Option<&str> {
    let quote = text[..at].chars().last()?;
    let end = text[at..].find(quote)?;
    Some(&text[at..at + end])
}

/// Every `needle…"value"` value in `text`.
fn values_after<'a>(text: &'a str, needles: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for needle in needles {
        let mut from = 0;
        while let Some(i) = text[from..].find(needle) {
            let at = from + i + needle.len();
            if let Some(v) = literal_after(text, at) {
                out.push(v);
            }
            from = at;
        }
    }
    out
}

/// The files an HTML page loads from `/ui/` (`src=`, `href=`).
fn html_refs(html: &str) -> Vec<String> {
    values_after(html, &["src=\"", "href=\"", "src='", "href='"])
        .into_iter()
        .filter_map(|v| v.strip_prefix("/ui/"))
        .map(str::to_string)
        .collect()
}

/// The modules a module imports (static `import … from './x.js'`, bare `import './x.js'`,
/// dynamic `import('./x.js')`), by file name.
fn js_imports(js: &str) -> Vec<String> {
    let found = values_after(js, &["from '", "from \"", "import '", "import \"", "import('", "import(\""]);
    found
        .into_iter()
        .map(|v| v.strip_prefix("./").unwrap_or_else(|| panic!("import {v:?} is not a sibling module ('./x.js')")))
        .map(str::to_string)
        .collect()
}

#[test]
fn reference_parsers_find_what_a_browser_loads() {
    let html = r##"<link rel="stylesheet" href="/ui/a.css"><script type="module" src="/ui/b.js"></script><a href="#/x">x</a>"##;
    assert_eq!(html_refs(html), ["b.js", "a.css"]);
    let js = "import { a,\n b } from './c.js';\nimport './d.js';\nconst e = await import(\"./e.js\");\n// from here";
    assert_eq!(js_imports(js), ["c.js", "d.js", "e.js"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_is_public_with_its_security_headers() {
    let app =
        TestApp::start_with(Backend::Sqlite, |c| c.auth.service_token = Some("ui-t0ken".to_string().into())).await;
    let response = app.client.get(app.url(UI_PATH)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "the page needs no credential");
    let h = response.headers().clone();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    assert_eq!(h["content-security-policy"], CONTENT_SECURITY_POLICY);
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-"), "the policy allows nothing inline or eval: {csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["cache-control"], "no-cache");
    let body = response.text().await.unwrap();
    assert_eq!(body, asset("index.html").unwrap().body);
    // The data behind it is not public: the API still wants the credential.
    let (status, _) = app.get_as(None, "/internal/v1/context/queues").await;
    assert_eq!(status, 401);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_referenced_file_is_served_and_every_embedded_file_is_referenced() {
    let app = TestApp::start(Backend::Sqlite).await;
    let index = app.client.get(app.url(UI_PATH)).send().await.unwrap().text().await.unwrap();
    let mut queue: VecDeque<String> = html_refs(&index).into();
    assert!(queue.iter().any(|r| r == "app.js") && queue.iter().any(|r| r == "style.css"), "{queue:?}");
    let mut seen = BTreeSet::from(["index.html".to_string()]);
    while let Some(name) = queue.pop_front() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let response = app.client.get(app.url(&format!("{UI_PATH}/{name}"))).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "/ui/{name} is referenced but not served");
        let h = response.headers().clone();
        assert_eq!(h["content-type"], content_type(&name), "/ui/{name}");
        assert_ne!(h["content-type"], "application/octet-stream", "/ui/{name} has no known type");
        assert_eq!(h["content-security-policy"], CONTENT_SECURITY_POLICY, "/ui/{name}");
        assert_eq!(h["x-content-type-options"], "nosniff", "/ui/{name}");
        let body = response.text().await.unwrap();
        assert_eq!(body, asset(&name).unwrap().body, "/ui/{name} is the embedded file");
        if name.ends_with(".js") {
            queue.extend(js_imports(&body));
        }
    }
    let embedded: BTreeSet<String> = ASSETS.iter().map(|a| a.name.to_string()).collect();
    let unreferenced: Vec<_> = embedded.difference(&seen).collect();
    assert!(unreferenced.is_empty(), "embedded but loaded by nothing: {unreferenced:?}");
    assert!(seen.len() >= 8, "the crawl found too little: {seen:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_files_are_api_errors() {
    let app = TestApp::start(Backend::Sqlite).await;
    for path in ["/ui/nope.js", "/ui/%2E%2E%2FCargo.toml", "/ui/index.html.bak", "/ui/APP.JS"] {
        let response = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 404, "{path}");
        assert_eq!(response.headers()["content-type"], "application/json", "{path}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["status"], 404, "{path}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{path}: {body}");
    }
    let slash = app.client.get(app.url("/ui/")).send().await.unwrap();
    assert_eq!(slash.status().as_u16(), 200, "/ui/ is the page too");
    assert!(slash.text().await.unwrap().contains("/ui/app.js"));
    let (status, body) = crate::harness::read(app.client.post(app.url(UI_PATH)).send().await.unwrap()).await;
    assert_eq!((status, body["status"].as_u64()), (405, Some(405)), "{body}");
    app.stop().await;
}

/// Attributes of every tag of an HTML text, lower-cased (`(tag, attribute names)`).
fn tags(html: &str) -> Vec<(String, Vec<String>)> {
    let lower = html.to_lowercase();
    lower
        .split('<')
        .skip(1)
        .filter(|t| !t.starts_with('/') && !t.starts_with('!'))
        .map(|t| {
            let inside = &t[..t.find('>').unwrap_or(t.len())];
            let mut words = inside.split_whitespace();
            let tag = words.next().unwrap_or_default().to_string();
            let attrs = words.filter_map(|w| w.split('=').next()).map(str::to_string).collect();
            (tag, attrs)
        })
        .collect()
}

#[test]
fn no_file_holds_what_the_policy_or_xss_safety_forbid() {
    for a in ASSETS {
        // Only this origin: the one URL allowed is the SVG namespace (a name, not a fetch).
        let external = a.body.replace("http://www.w3.org/2000/svg", "");
        assert!(!external.contains("http://") && !external.contains("https://"), "{} names another origin", a.name);
        if a.name.ends_with(".html") {
            for (tag, attrs) in tags(a.body) {
                assert!(!attrs.iter().any(|n| n.starts_with("on")), "{}: inline handler on <{tag}> {attrs:?}", a.name);
                assert!(!attrs.iter().any(|n| n == "style"), "{}: inline style on <{tag}>", a.name);
                assert!(tag != "script" || attrs.iter().any(|n| n == "src"), "{}: an inline <script>", a.name);
                assert!(tag != "style", "{}: an inline <style>", a.name);
            }
        }
        if a.name.ends_with(".js") {
            for forbidden in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
                "setAttribute('on",
                "setAttribute('style",
                "localStorage",
                "EventSource(",
            ] {
                assert!(!a.body.contains(forbidden), "{} uses {forbidden}", a.name);
            }
        }
    }
}

/// A path with each parameter (`{id}`, or a template literal's `${…}`) as `{}`.
fn path_shape(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        out.push_str(rest[..open].trim_end_matches('$'));
        out.push_str("{}");
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// The dashboard has no private endpoints: every API path its modules name is in the
/// OpenAPI document.
#[test]
fn pages_call_only_documented_api_paths() {
    let doc: serde_json::Value = serde_json::from_str(&document_json()).unwrap();
    let documented: BTreeSet<String> = doc["paths"].as_object().unwrap().keys().map(|p| path_shape(p)).collect();
    let mut named = 0;
    for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
        for (i, _) in a.body.match_indices("/internal/") {
            // A string literal's start; a path mentioned in a comment's prose is not called.
            let quote = a.body[..i].chars().last().unwrap();
            if !matches!(quote, '\'' | '"' | '`') {
                continue;
            }
            let end = a.body[i..].find(quote).unwrap();
            let path = a.body[i..i + end].split('?').next().unwrap();
            let shape = path_shape(path);
            assert!(documented.contains(&shape), "{} calls {path}, which is not in the API document", a.name);
            named += 1;
        }
    }
    assert!(named >= 10, "found only {named} API paths in the modules");
}
