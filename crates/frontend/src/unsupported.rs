//! The one report importers give for a graph with ops they do not build:
//! every such op at once, by kind, so a user sees the whole list, not the
//! first failure.

/// The ops of one kind an importer does not build.
pub(crate) struct Kind<'a> {
    /// What they are (`ops`, `tensor ops`).
    pub label: &'a str,
    /// Each op, as the message names it (``Conv2D (`conv`)``).
    pub ops: Vec<String>,
    /// Why, or what to do, after the list (may be empty).
    pub note: &'a str,
}

/// `unsupported: ops A, B; tensor ops C (why)`, or `None` when every kind is
/// empty.
pub(crate) fn message(kinds: &[Kind<'_>]) -> Option<String> {
    let parts: Vec<String> = kinds
        .iter()
        .filter(|k| !k.ops.is_empty())
        .map(|k| {
            let note = if k.note.is_empty() {
                String::new()
            } else {
                format!(" {}", k.note)
            };
            format!("{} {}{note}", k.label, k.ops.join(", "))
        })
        .collect();
    (!parts.is_empty()).then(|| format!("unsupported: {}", parts.join("; ")))
}
