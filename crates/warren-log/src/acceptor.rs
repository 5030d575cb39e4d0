//! A member that comes back to a stream as a replica: before it takes the
//! leader's chunks again, its log is cut where it stops agreeing with the
//! leader's (osiris_log:init_acceptor). A chunk is the same on two members
//! when its id and its epoch are: the leader of that epoch wrote it once.
//! Chunks past the cut were never committed (a new leader has every
//! committed chunk), so nothing a client was told is lost.

use std::fs::OpenOptions;
use std::path::Path;

use crate::error::{LogError, Result};
use crate::files::{self, IndexRecord, FILE_HEADER, INDEX_RECORD};
use crate::log::{read_chunk_header, Config, Log};
use crate::overview::{overview, Overview};

/// What of a returning member's log stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// All of it: it is a prefix of the leader's.
    Nothing,
    /// Up to and with this chunk; what follows goes.
    After(u64),
    /// None of it: it shares no chunk with the leader's, or ends before
    /// the leader's first offset.
    Everything,
}

/// Where `local` (with `epoch_of`, the epoch of a chunk id it holds) stops
/// agreeing with `leader`. The leader's epochs are tried newest first: the
/// last chunk of an epoch held here with that epoch is the common point;
/// a log whose last chunk is of that epoch, and older, is a prefix.
pub fn cut_point(local: &Overview, epoch_of: impl Fn(u64) -> Option<u64>, leader: &Overview) -> Cut {
    let Some((_, local_last)) = local.range else {
        return Cut::Nothing;
    };
    let last = local.epochs.last().copied();
    for &(epoch, chunk) in leader.epochs.iter().rev() {
        match epoch_of(chunk) {
            Some(e) if e == epoch => return Cut::After(chunk),
            Some(_) => continue,
            None => {
                if last.is_some_and(|(e, id)| e == epoch && id < chunk) {
                    let before = leader.range.is_some_and(|(first, _)| local_last < first);
                    return if before { Cut::Everything } else { Cut::Nothing };
                }
            }
        }
    }
    Cut::Everything
}

/// Cut the log in `dir` (not open elsewhere) to agree with `leader`'s
/// overview; returns what was cut. A torn tail is recovered first.
pub fn accept(dir: &Path, leader: &Overview) -> Result<Cut> {
    let log = Log::open(dir, Config::default())?;
    let local = overview(&log.view())?;
    drop(log);
    let segments = files::list(dir)?;
    // A chunk held here: its segment, its place in that index, the record
    // (each lookup reads one index: they are few, one per epoch at most).
    let find = |id: u64| -> Option<(u64, usize, IndexRecord)> {
        let seg = *segments.iter().rev().find(|s| **s <= id)?;
        let (_, ip) = files::names(dir, seg);
        let records = files::read_index(&ip).ok()?;
        let i = records.binary_search_by_key(&id, |r| r.chunk_id).ok()?;
        Some((seg, i, records[i]))
    };
    let cut = cut_point(&local, |id| find(id).map(|(_, _, r)| r.epoch), leader);
    match cut {
        Cut::Nothing => {}
        Cut::Everything => {
            for &s in &segments {
                remove(dir, s)?;
            }
        }
        Cut::After(id) => {
            let Some((seg, i, r)) = find(id) else {
                return Err(LogError::Corrupt {
                    path: dir.display().to_string(),
                    why: format!("chunk {id} gone while the log was cut"),
                });
            };
            let position = r.position;
            let (sp, ip) = files::names(dir, seg);
            let io = |p: &Path| {
                let p = p.to_path_buf();
                move |e| LogError::io(&p, e)
            };
            let segment = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&sp)
                .map_err(io(&sp))?;
            let len = segment.metadata().map_err(io(&sp))?.len();
            let Some((_, total)) = read_chunk_header(&segment, position as u64, len, false) else {
                return Err(LogError::Corrupt {
                    path: sp.display().to_string(),
                    why: format!("no whole chunk {id} at position {position}"),
                });
            };
            segment.set_len(position as u64 + total).map_err(io(&sp))?;
            segment.sync_all().map_err(io(&sp))?;
            let index = OpenOptions::new().write(true).open(&ip).map_err(io(&ip))?;
            index
                .set_len(FILE_HEADER + ((i + 1) * INDEX_RECORD) as u64)
                .map_err(io(&ip))?;
            index.sync_all().map_err(io(&ip))?;
            for &s in segments.iter().filter(|s| **s > seg) {
                remove(dir, s)?;
            }
        }
    }
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(cut)
}

fn remove(dir: &Path, first: u64) -> Result<()> {
    let (sp, ip) = files::names(dir, first);
    for p in [&sp, &ip] {
        match std::fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io(p, e)),
        }
    }
    Ok(())
}

impl Log {
    /// [`accept`] on a log that is open: cut its files to agree with the
    /// `leader`'s overview, then take up what is left (readers sharing
    /// the view see the shorter log; a replica's readers read nothing
    /// past the committed chunk anyway, and a cut removes only chunks
    /// never committed). A log cut whole starts again at the leader's
    /// first offset. Cut::Nothing when nothing went.
    pub fn cut_to(&mut self, leader: &Overview) -> Result<Cut> {
        let last = self.view.snapshot().segments.iter().rev().find_map(|s| s.last);
        // What is cut may be written again at the same places.
        self.view.clear_recent();
        let cut = accept(&self.dir, leader)?;
        if cut == Cut::Nothing || last.is_some_and(|r| cut == Cut::After(r.chunk_id)) {
            return Ok(Cut::Nothing);
        }
        let first = leader.range.map_or(0, |(f, _)| f);
        let fresh = Log::open_from(&self.dir, self.config.clone(), first)?;
        let readable = self.view.state.read().expect("view lock").readable_below;
        let mut st = fresh.view.snapshot();
        st.readable_below = readable;
        *self.view.state.write().expect("view lock") = st;
        self.segment = fresh.segment;
        self.index = fresh.index;
        self.sealed.clear();
        self.tracking = fresh.tracking;
        Ok(cut)
    }
}
