//! What a stream's log holds, as a member that comes back compares it with
//! the leader's before it takes chunks again (osiris_log:overview): the
//! offsets it holds, and, for each epoch in turn, the id of the last chunk
//! written in it. Where the two first disagree is where the returning
//! member's log must be cut.

use crate::error::{LogError, Result};
use crate::files;
use crate::log::View;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overview {
    /// The first and the last offset held; None when it holds none.
    pub range: Option<(u64, u64)>,
    /// (epoch, id of the last chunk written in it), oldest first.
    pub epochs: Vec<(u64, u64)>,
}

/// `view`'s overview, from every segment's index (a segment retention
/// deletes meanwhile is left out, as if it had gone before).
pub fn overview(view: &View) -> Result<Overview> {
    let st = view.snapshot();
    let mut epochs: Vec<(u64, u64)> = Vec::new();
    let mut first = None;
    for s in &st.segments {
        let (_, ip) = files::names(&view.dir, s.first_offset);
        let records = match files::read_index(&ip) {
            Ok(r) => r,
            Err(LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        // Only what readers may see: the view's count, not a record
        // written after the snapshot was taken.
        for r in records.iter().take(s.chunks as usize) {
            first.get_or_insert(r.chunk_id);
            match epochs.last_mut() {
                Some((e, last)) if *e == r.epoch => *last = r.chunk_id,
                _ => epochs.push((r.epoch, r.chunk_id)),
            }
        }
    }
    let range = first
        .filter(|f| st.next_offset > *f)
        .map(|f| (f, st.next_offset - 1));
    Ok(Overview { range, epochs })
}
