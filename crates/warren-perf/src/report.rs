//! How results are shown: a line per second, a summary per run, JSON for
//! machines, and an SVG of throughput and latency over time (stages of a
//! scenario side by side) for people.

use serde_json::{json, Value};

use crate::stats::{Percentiles, Sample, Summary};

fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

pub fn live_line(s: &Sample) -> String {
    let mut line = format!(
        "time {:6.1} s | sent {:>9.0} msg/s | confirmed {:>9.0} msg/s | received {:>9.0} msg/s",
        s.t, s.sent, s.confirmed, s.received
    );
    if s.nacked > 0.0 {
        line.push_str(&format!(" | nacked {:.0} msg/s", s.nacked));
    }
    if s.consumer.count > 0 {
        line.push_str(&format!(
            " | latency p50 {} p99 {}",
            ms(s.consumer.p50),
            ms(s.consumer.p99)
        ));
    }
    if s.confirm.count > 0 {
        line.push_str(&format!(
            " | confirm p50 {} p99 {}",
            ms(s.confirm.p50),
            ms(s.confirm.p99)
        ));
    }
    line
}

fn percentiles_line(what: &str, p: &Percentiles) -> String {
    format!(
        "{what} latency µs (n={}): p50 {} | p75 {} | p95 {} | p99 {} | p99.9 {} | max {}",
        p.count, p.p50, p.p75, p.p95, p.p99, p.p999, p.max
    )
}

pub fn summary_text(label: &str, s: &Summary) -> String {
    let mut out = format!(
        "== {label}: {:.1} s\nsent {} ({:.0} msg/s), confirmed {} ({:.0} msg/s), nacked {}, returned {}, received {} ({:.0} msg/s)\n",
        s.seconds,
        s.sent,
        s.rate(s.sent),
        s.confirmed,
        s.rate(s.confirmed),
        s.nacked,
        s.returned,
        s.received,
        s.rate(s.received)
    );
    if s.consumer.count > 0 {
        out.push_str(&percentiles_line("consumer", &s.consumer));
        out.push('\n');
    }
    if s.confirm.count > 0 {
        out.push_str(&percentiles_line("confirm", &s.confirm));
        out.push('\n');
    }
    out
}

fn percentiles_json(p: &Percentiles) -> Value {
    json!({
        "count": p.count, "p50": p.p50, "p75": p.p75, "p95": p.p95,
        "p99": p.p99, "p99.9": p.p999, "max": p.max,
    })
}

pub fn json(command: &str, stages: &[(String, Summary)]) -> Value {
    let stages: Vec<Value> = stages
        .iter()
        .map(|(label, s)| {
            json!({
                "stage": label,
                "seconds": s.seconds,
                "sent": s.sent,
                "confirmed": s.confirmed,
                "nacked": s.nacked,
                "returned": s.returned,
                "received": s.received,
                "sent_rate": s.rate(s.sent),
                "confirmed_rate": s.rate(s.confirmed),
                "received_rate": s.rate(s.received),
                "consumer_latency_us": percentiles_json(&s.consumer),
                "confirm_latency_us": percentiles_json(&s.confirm),
                "timeline": s.samples.iter().map(|x| json!({
                    "t": x.t, "sent": x.sent, "confirmed": x.confirmed,
                    "received": x.received,
                    "latency_p50_us": x.consumer.p50, "latency_p99_us": x.consumer.p99,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "tool": "warren-perf", "command": command, "stages": stages })
}

const W: f64 = 900.0;
const H: f64 = 220.0;
const LEFT: f64 = 80.0;
const TOP: f64 = 30.0;

/// A line on a chart: name, colour, points of (t, value).
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One chart of several series.
fn chart(
    out: &mut String,
    y0: f64,
    title: &str,
    unit: &str,
    series: &[Series],
    t_max: f64,
    marks: &[(f64, String)],
) {
    let v_max = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let x = |t: f64| LEFT + (t / t_max.max(1.0)) * (W - LEFT - 20.0);
    let y = |v: f64| y0 + TOP + H - (v / v_max) * H;
    out.push_str(&format!(
        "<text x=\"{LEFT}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{title}</text>\n",
        y0 + 18.0
    ));
    out.push_str(&format!(
        "<rect x=\"{LEFT}\" y=\"{}\" width=\"{}\" height=\"{H}\" fill=\"none\" stroke=\"#999\"/>\n",
        y0 + TOP,
        W - LEFT - 20.0
    ));
    for k in 0..=4 {
        let v = v_max * k as f64 / 4.0;
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{} {unit}</text>\n",
            LEFT - 4.0,
            y(v) + 3.0,
            human(v)
        ));
        let t = t_max * k as f64 / 4.0;
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{t:.0}</text>\n",
            x(t),
            y0 + TOP + H + 12.0
        ));
    }
    for (t, label) in marks {
        out.push_str(&format!(
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ccc\" stroke-dasharray=\"3,3\"/><text x=\"{3:.1}\" y=\"{4}\" font-size=\"10\">{label}</text>\n",
            x(*t),
            y0 + TOP,
            y0 + TOP + H,
            x(*t) + 3.0,
            y0 + TOP + 12.0
        ));
    }
    for (i, (name, colour, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
            .collect();
        out.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
            path.join(" ")
        ));
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"11\" fill=\"{colour}\">{name}</text>\n",
            W - 260.0 + i as f64 * 85.0,
            y0 + 18.0
        ));
    }
    out.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">seconds</text>\n",
        (W + LEFT) / 2.0,
        y0 + TOP + H + 24.0
    ));
}

/// Throughput and consumer latency over time; a scenario's stages follow
/// each other on one time axis, each marked with its label.
pub fn svg(title: &str, stages: &[(String, Summary)]) -> String {
    let mut offset = 0.0;
    let (mut sent, mut recv, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut marks = Vec::new();
    for (label, s) in stages {
        marks.push((offset, label.clone()));
        for x in &s.samples {
            let t = offset + x.t;
            sent.push((t, x.sent));
            recv.push((t, x.received));
            if x.consumer.count > 0 {
                p50.push((t, x.consumer.p50 as f64 / 1000.0));
                p99.push((t, x.consumer.p99 as f64 / 1000.0));
            }
        }
        offset += s.seconds;
    }
    let height = 2.0 * (H + TOP + 40.0) + 30.0;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"16\" font-size=\"11\" fill=\"#555\">{}</text>\n",
        escape(&title.chars().take(140).collect::<String>())
    );
    let marks = if stages.len() > 1 { marks } else { Vec::new() };
    chart(
        &mut out,
        20.0,
        "Throughput",
        "msg/s",
        &[("sent", "#1f77b4", sent), ("received", "#d62728", recv)],
        offset,
        &marks,
    );
    chart(
        &mut out,
        20.0 + H + TOP + 40.0,
        "Consumer latency",
        "ms",
        &[("p50", "#2ca02c", p50), ("p99", "#9467bd", p99)],
        offset,
        &marks,
    );
    out.push_str("</svg>\n");
    out
}

/// 643210 -> "643k", 1500000 -> "1.5M", 7.5 -> "7.5".
fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        let sample = |t: f64| Sample {
            t,
            sent: 100.0,
            confirmed: 100.0,
            received: 90.0,
            consumer: Percentiles {
                count: 90,
                p50: 1500,
                p99: 4000,
                ..Default::default()
            },
            ..Default::default()
        };
        Summary {
            seconds: 2.0,
            sent: 200,
            confirmed: 200,
            received: 180,
            samples: vec![sample(1.0), sample(2.0)],
            ..Default::default()
        }
    }

    #[test]
    fn json_has_rates_and_timeline() {
        let v = json("warren-perf -z 2", &[("run".into(), summary())]);
        let st = &v["stages"][0];
        assert_eq!(st["sent"], 200);
        assert_eq!(st["received_rate"], 90.0);
        assert_eq!(st["timeline"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn svg_draws_both_charts() {
        let s = svg(
            "a <b> run",
            &[("c=1".into(), summary()), ("c=5".into(), summary())],
        );
        assert!(s.starts_with("<svg"));
        assert_eq!(s.matches("<polyline").count(), 4);
        assert!(s.contains("c=5") && s.contains("a &lt;b&gt; run"));
    }

    #[test]
    fn lines_read_well() {
        let l = live_line(&summary().samples[0]);
        assert!(l.contains("received        90 msg/s"), "{l}");
        assert!(l.contains("latency p50 1.50 ms p99 4.00 ms"), "{l}");
        let t = summary_text("run", &summary());
        assert!(t.contains("received 180 (90 msg/s)"), "{t}");
    }
}
