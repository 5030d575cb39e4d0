//! Topic exchange (0-9-1 §3.1.3.3): binding keys are dot-separated word
//! patterns where `*` matches exactly one word and `#` zero or more. The
//! patterns live in a trie of words, so a publish walks the trie once
//! instead of testing every binding. `#` can match many ways; a visited set
//! of (node, word position) keeps the walk linear in trie size times words
//! even for patterns such as `#.#.#`.

use ahash::{AHashMap as HashMap, AHashSet as HashSet};

use bytes::Bytes;
use warren_amqp091::ShortStr;

use super::binding::Destination;

#[derive(Debug, Default)]
struct Node {
    words: HashMap<Bytes, usize>,
    star: Option<usize>,
    hash: Option<usize>,
    /// Destinations whose pattern ends here, with binding counts.
    dests: Vec<(Destination, usize)>,
}

#[derive(Debug)]
pub struct TopicTrie {
    nodes: Vec<Node>,
    /// Bindings removed since the last rebuild; dead nodes are reclaimed by
    /// rebuilding once they outnumber the live ones.
    removed: usize,
    live: Vec<(ShortStr, Destination)>,
}

impl Default for TopicTrie {
    fn default() -> Self {
        TopicTrie {
            nodes: vec![Node::default()],
            removed: 0,
            live: Vec::new(),
        }
    }
}

/// A key's words, split at every dot as RabbitMQ splits them: the empty
/// key has no words at all (so `*` does not match it, `#` does), while
/// every other key has one more word than it has dots, empty words
/// included (`a.` is `a` and ``, `.` is two empty words).
fn words(key: &[u8]) -> impl Iterator<Item = &[u8]> {
    let none = key.is_empty();
    key.split(|b| *b == b'.').filter(move |_| !none)
}

impl TopicTrie {
    pub fn add(&mut self, pattern: &ShortStr, dest: Destination) {
        self.live.push((pattern.clone(), dest.clone()));
        self.insert(pattern, dest);
    }

    fn insert(&mut self, pattern: &ShortStr, dest: Destination) {
        let mut at = 0;
        for w in words(pattern) {
            let next = match w {
                b"*" => self.nodes[at].star,
                b"#" => self.nodes[at].hash,
                _ => self.nodes[at].words.get(w).copied(),
            };
            at = match next {
                Some(n) => n,
                None => {
                    let n = self.nodes.len();
                    self.nodes.push(Node::default());
                    match w {
                        b"*" => self.nodes[at].star = Some(n),
                        b"#" => self.nodes[at].hash = Some(n),
                        _ => {
                            self.nodes[at].words.insert(Bytes::copy_from_slice(w), n);
                        }
                    }
                    n
                }
            };
        }
        let d = &mut self.nodes[at].dests;
        match d.iter_mut().find(|(x, _)| x == &dest) {
            Some((_, n)) => *n += 1,
            None => d.push((dest, 1)),
        }
    }

    pub fn remove(&mut self, pattern: &ShortStr, dest: &Destination) {
        let Some(pos) = self.live.iter().position(|(p, d)| p == pattern && d == dest) else {
            return;
        };
        self.live.swap_remove(pos);
        let mut at = 0;
        for w in words(pattern) {
            let next = match w {
                b"*" => self.nodes[at].star,
                b"#" => self.nodes[at].hash,
                _ => self.nodes[at].words.get(w).copied(),
            };
            match next {
                Some(n) => at = n,
                None => return,
            }
        }
        let d = &mut self.nodes[at].dests;
        if let Some(i) = d.iter().position(|(x, _)| x == dest) {
            d[i].1 -= 1;
            if d[i].1 == 0 {
                d.remove(i);
            }
        }
        self.removed += 1;
        if self.removed > self.live.len().max(16) {
            self.rebuild();
        }
    }

    fn rebuild(&mut self) {
        let live = std::mem::take(&mut self.live);
        self.nodes = vec![Node::default()];
        self.removed = 0;
        for (p, d) in &live {
            self.insert(p, d.clone());
        }
        self.live = live;
    }

    pub fn route(&self, routing_key: &[u8], out: &mut Vec<Destination>) {
        let ws: Vec<&[u8]> = words(routing_key).collect();
        let mut seen: Option<HashSet<(usize, usize)>> = None;
        self.walk(0, &ws, 0, out, &mut seen);
    }

    fn walk(
        &self,
        node: usize,
        ws: &[&[u8]],
        i: usize,
        out: &mut Vec<Destination>,
        seen: &mut Option<HashSet<(usize, usize)>>,
    ) {
        let n = &self.nodes[node];
        if i == ws.len() {
            out.extend(n.dests.iter().map(|(d, _)| d.clone()));
        } else {
            if let Some(&c) = n.words.get(ws[i]) {
                self.walk(c, ws, i + 1, out, seen);
            }
            if let Some(c) = n.star {
                self.walk(c, ws, i + 1, out, seen);
            }
        }
        if let Some(c) = n.hash {
            // `#` swallows zero or more words: try every split, once each.
            for j in i..=ws.len() {
                if seen.get_or_insert_with(HashSet::new).insert((c, j)) {
                    self.walk(c, ws, j, out, seen);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, key: &str) -> bool {
        let mut t = TopicTrie::default();
        t.add(&pattern.into(), Destination::Queue("q".into()));
        let mut out = vec![];
        t.route(key.as_bytes(), &mut out);
        !out.is_empty()
    }

    #[test]
    fn rabbitmq_topic_semantics() {
        let cases = [
            ("a.b.c", "a.b.c", true),
            ("a.*.c", "a.b.c", true),
            ("a.*.c", "a.c", false),
            ("a.#.c", "a.c", true),
            ("a.#.c", "a.b.b.c", true),
            ("#", "anything.at.all", true),
            ("*", "a.b", false),
            ("a.#", "a", true),
            ("#.a", "a", true),
            ("#.#", "a.b", true),
            ("a.b", "a.b.c", false),
            ("#.b.#", "a.b.c", true),
            ("#.b.#", "a.c", false),
        ];
        for (p, k, want) in cases {
            assert_eq!(matches(p, k), want, "pattern {p:?} key {k:?}");
        }
    }

    /// Empty keys and empty words, exactly as RabbitMQ 3.10 routed them:
    /// each pattern was bound to its own queue on a real node, every key
    /// published once, and the keys each queue received are listed here.
    /// The empty key has no words (`*` misses it, `#` and `` take it);
    /// any other key has one word more than it has dots.
    #[test]
    fn empty_words_route_as_rabbitmq_3_10_did() {
        const KEYS: [&str; 11] = [
            "", "a", "a.", ".a", ".", "a..b", "a.b", "a.b.c", "..", "b.a", "a.b.b",
        ];
        let observed: [(&str, &[&str]); 23] = [
            ("", &[""]),
            (
                "#",
                &[
                    "", "a", "a.", ".a", ".", "a..b", "a.b", "a.b.c", "..", "b.a", "a.b.b",
                ],
            ),
            ("*", &["a"]),
            (
                "*.#",
                &["a", "a.", ".a", ".", "a..b", "a.b", "a.b.c", "..", "b.a", "a.b.b"],
            ),
            (
                "#.*",
                &["a", "a.", ".a", ".", "a..b", "a.b", "a.b.c", "..", "b.a", "a.b.b"],
            ),
            ("*.*", &["a.", ".a", ".", "a.b", "b.a"]),
            ("a.*", &["a.", "a.b"]),
            ("a.#", &["a", "a.", "a..b", "a.b", "a.b.c", "a.b.b"]),
            ("#.a", &["a", ".a", "b.a"]),
            ("a..b", &["a..b"]),
            ("a.", &["a."]),
            (".a", &[".a"]),
            (".", &["."]),
            (
                "#.#",
                &[
                    "", "a", "a.", ".a", ".", "a..b", "a.b", "a.b.c", "..", "b.a", "a.b.b",
                ],
            ),
            ("a.*.#", &["a.", "a..b", "a.b", "a.b.c", "a.b.b"]),
            ("#.#.a", &["a", ".a", "b.a"]),
            ("*.a", &[".a", "b.a"]),
            ("a.#.#.b", &["a..b", "a.b", "a.b.b"]),
            ("a.*.*", &["a..b", "a.b.c", "a.b.b"]),
            ("..", &[".."]),
            ("#.", &["a.", ".", ".."]),
            (".#", &[".a", ".", ".."]),
            ("*.", &["a.", "."]),
        ];
        for (pattern, took) in observed {
            for key in KEYS {
                let want = took.contains(&key);
                assert_eq!(matches(pattern, key), want, "pattern {pattern:?} key {key:?}");
            }
        }
    }

    #[test]
    fn many_hashes_do_not_explode() {
        let pattern = vec!["#"; 100].join(".") + ".z";
        let key = vec!["a"; 120].join(".");
        assert!(!matches(&pattern, &key));
        assert!(matches(&pattern, &(key + ".z")));
    }

    #[test]
    fn each_destination_once_and_removal() {
        let mut t = TopicTrie::default();
        let q = Destination::Queue("q".into());
        t.add(&"a.*".into(), q.clone());
        t.add(&"a.b".into(), q.clone());
        let mut out = vec![];
        t.route(b"a.b", &mut out);
        assert_eq!(out.len(), 2); // the vhost deduplicates queues
        for _ in 0..40 {
            t.add(&"x.y".into(), q.clone());
            t.remove(&"x.y".into(), &q);
        }
        t.remove(&"a.*".into(), &q);
        out.clear();
        t.route(b"a.c", &mut out);
        assert!(out.is_empty());
        out.clear();
        t.route(b"a.b", &mut out);
        assert_eq!(out, vec![q]);
    }
}
