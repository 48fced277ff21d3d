//! The log subscriber `main.rs` installs: `--log-format text` (for people)
//! or `json` (one JSON object a line for log collectors), with the same
//! fields: the time, the level, the target (module), the message and each
//! event's own fields (`client`, `addr`, ...), which JSON puts beside the
//! message rather than under `fields`.

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// `--log-format`'s values.
pub const FORMATS: [&str; 2] = ["text", "json"];

/// A subscriber writing to `writer`, filtered by `filter`, in `format`
/// (`json`, or anything else for text); `ansi` colours text.
pub fn subscriber<W>(
    format: &str,
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    if format == "json" {
        Box::new(builder.json().flatten_event(true).with_ansi(false).finish())
    } else {
        Box::new(builder.with_ansi(ansi).finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buf {
        type Writer = Buf;
        fn make_writer(&'w self) -> Buf {
            self.clone()
        }
    }

    /// Logs what the server logs (a message with fields, one with a
    /// newline and quotes in a field) in `format`; the lines written.
    fn lines(format: &str) -> Vec<String> {
        let buf = Buf::default();
        let sub = subscriber(format, EnvFilter::new("info"), false, buf.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::info!(client = 7, addr = %"127.0.0.1:5000", "closing client that reached max query buffer length");
            tracing::warn!(path = "a \"b\"\nc", "cannot read the policies");
            tracing::debug!("filtered out");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(String::from).collect()
    }

    #[test]
    fn json_is_one_object_a_line_with_the_text_forms_fields() {
        let text = lines("text");
        let json = lines("json");
        assert_eq!(text.len(), 2, "{text:?}");
        assert_eq!(json.len(), 2, "{json:?}");
        for (t, j) in text.iter().zip(&json) {
            let v: serde_json::Value =
                serde_json::from_str(j).unwrap_or_else(|e| panic!("{e}: {j}"));
            let o = v
                .as_object()
                .unwrap_or_else(|| panic!("not an object: {j}"));
            for field in ["timestamp", "level", "target", "message"] {
                assert!(o.contains_key(field), "{field} missing: {j}");
            }
            // Each field the text line shows is in the object, same value.
            let level = o["level"].as_str().unwrap();
            assert!(t.contains(level), "{t} / {j}");
            assert!(t.contains(o["message"].as_str().unwrap()), "{t} / {j}");
            assert!(t.contains(o["target"].as_str().unwrap()), "{t} / {j}");
        }
        let first: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
        assert_eq!(first["client"], 7);
        assert_eq!(first["addr"], "127.0.0.1:5000");
        assert!(text[0].contains("client=7") && text[0].contains("addr=127.0.0.1:5000"));
        let second: serde_json::Value = serde_json::from_str(&json[1]).unwrap();
        assert_eq!(second["path"], "a \"b\"\nc");
    }
}
