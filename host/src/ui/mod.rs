//! The console at `/ui/`: a few static files, embedded in the binary, that
//! call the HTTP API from the browser with the key the person enters. No
//! auth here (the files hold no data); every answer carries a
//! Content-Security-Policy that lets the page load and call only its own
//! origin. See `README.md` beside this file.

use hyper::{header, Method, StatusCode};

use crate::http::{full, ApiError, Response};

/// Every file of the console: its name under `/ui/`, content type and bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    ("", "text/html; charset=utf-8", include_bytes!("index.html")),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("app.js"),
    ),
    (
        "contention.js",
        "text/javascript; charset=utf-8",
        include_bytes!("contention.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_bytes!("api.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("style.css"),
    ),
    ("icon.svg", "image/svg+xml", include_bytes!("icon.svg")),
];

/// Only this origin, no plugins, no framing, no `<base>`, no form posts.
const CSP: &str =
    "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Answers `GET /ui/{tail}`: `/ui` redirects to `/ui/`, which is the page;
/// anything else is one of [`FILES`] or 404.
///
/// # Errors
/// 405 for another method than GET, 404 for an unknown file.
pub fn serve(method: &Method, tail: &[&str]) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed("GET"));
    }
    let name = match tail {
        [] => return Ok(redirect("/ui/")),
        [name] => *name,
        _ => return Err(ApiError::not_found("no such console file")),
    };
    let (_, content_type, bytes) = FILES
        .iter()
        .find(|(file, ..)| *file == name)
        .ok_or_else(|| ApiError::not_found("no such console file"))?;
    let mut response = hyper::Response::new(full(*bytes));
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, *content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        // The binary is the version: revalidate rather than keep a stale page.
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        headers.insert(name, header::HeaderValue::from_static(value));
    }
    Ok(response)
}

fn redirect(to: &'static str) -> Response {
    let mut response = hyper::Response::new(full(""));
    *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
    response
        .headers_mut()
        .insert(header::LOCATION, header::HeaderValue::from_static(to));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_files_are_served_and_nothing_else() {
        for (name, ..) in FILES {
            let response = serve(&Method::GET, &[name]).unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{name}");
            assert!(response
                .headers()
                .contains_key(header::CONTENT_SECURITY_POLICY));
        }
        assert_eq!(
            serve(&Method::GET, &[]).unwrap().status(),
            StatusCode::MOVED_PERMANENTLY
        );
        assert!(serve(&Method::GET, &["secret.txt"]).is_err());
        assert!(serve(&Method::GET, &["a", "app.js"]).is_err());
        assert!(serve(&Method::POST, &[""]).is_err());
    }
}
