//! The seed-003 sweeps (publisher confirms and consumer acks as flow
//! control): one setting moves through its stages while the rest stay at
//! the blog's values (1 KB messages unless `-s` says otherwise).

use crate::options::{Options, Scenario};

/// The (label, options) of every stage; a plain run is one stage.
pub fn stages(opts: &Options) -> Vec<(String, Options)> {
    let Some(sc) = opts.scenario else {
        return vec![("run".to_string(), opts.clone())];
    };
    let base = |o: &mut Options| {
        o.scenario = None;
        o.time = opts.stage_time;
        o.pmessages = 0;
        o.cmessages = 0;
        // Each stage gets fresh queues unless the user named them.
        if o.queue.is_none() {
            o.auto_delete = Some(true);
        }
    };
    let make = |label: String, f: &dyn Fn(&mut Options)| {
        let mut o = opts.clone();
        base(&mut o);
        f(&mut o);
        (label, o)
    };
    match sc {
        Scenario::Inflight => [1u32, 5, 20, 200, 1000, 10000]
            .iter()
            .map(|&c| {
                make(format!("in-flight {c}"), &|o| {
                    o.confirm = c;
                    o.qos = 1000;
                    o.ack_every = 1;
                    o.autoack = false;
                })
            })
            .collect(),
        Scenario::Prefetch => [1u32, 10, 100, 1000, 10000]
            .iter()
            .map(|&q| {
                make(format!("prefetch {q}"), &|o| {
                    o.confirm = 1000;
                    o.qos = q;
                    o.ack_every = 1;
                    o.autoack = false;
                })
            })
            .collect(),
        Scenario::AckInterval => [1u32, 10, 50, 100, 250, 500]
            .iter()
            .map(|&a| {
                make(format!("ack every {a}"), &|o| {
                    o.confirm = 1000;
                    o.qos = 1000;
                    o.ack_every = a;
                    o.autoack = false;
                })
            })
            .collect(),
        Scenario::NoConfirmsNoAcks => vec![make("no confirms, no acks".into(), &|o| {
            o.confirm = 0;
            o.autoack = true;
        })],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn opts(args: &[&str]) -> Options {
        let mut o =
            Options::try_parse_from(std::iter::once("warren-perf").chain(args.iter().copied())).unwrap();
        o.validate().unwrap();
        o
    }

    #[test]
    fn the_three_sweeps_and_the_baseline() {
        let s = stages(&opts(&["--scenario", "inflight", "--stage-time", "7"]));
        let c: Vec<u32> = s.iter().map(|x| x.1.confirm).collect();
        assert_eq!(c, vec![1, 5, 20, 200, 1000, 10000]);
        assert!(s
            .iter()
            .all(|x| x.1.qos == 1000 && x.1.ack_every == 1 && x.1.time == 7));
        assert!(s.iter().all(|x| x.1.scenario.is_none()));

        let s = stages(&opts(&["--scenario", "prefetch"]));
        let q: Vec<u32> = s.iter().map(|x| x.1.qos).collect();
        assert_eq!(q, vec![1, 10, 100, 1000, 10000]);

        let s = stages(&opts(&["--scenario", "ack-interval"]));
        let a: Vec<u32> = s.iter().map(|x| x.1.ack_every).collect();
        assert_eq!(a, vec![1, 10, 50, 100, 250, 500]);
        assert!(s.iter().all(|x| x.1.confirm == 1000 && x.1.qos == 1000));

        let s = stages(&opts(&["--scenario", "no-confirms-no-acks"]));
        assert_eq!(s.len(), 1);
        assert!(s[0].1.autoack && s[0].1.confirm == 0);
    }

    #[test]
    fn a_plain_run_is_one_stage() {
        let s = stages(&opts(&["-z", "3", "-c", "10"]));
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].1.time, s[0].1.confirm), (3, 10));
    }
}
