//! Charts as SVG drawn on the server: stacked bars and lines over the buckets of a time window,
//! laid out here and drawn by the `chart.html` template. No script and no chart library: a
//! chart is a few dozen rectangles or one polyline per series, with its figures in `<title>`s
//! for screen readers and tooltips.

use askama::Template;
use chrono::{DateTime, Utc};

/// Drawing size in SVG units (the SVG scales to its container).
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// One series: its name and colour.
#[derive(Clone, Debug)]
pub struct Series {
    /// Shown in the legend.
    pub label: &'static str,
    /// A CSS colour.
    pub color: &'static str,
}

/// A rectangle of a bar chart.
#[derive(Clone, Debug)]
pub struct Rect {
    /// Left edge.
    pub x: String,
    /// Top edge.
    pub y: String,
    /// Width.
    pub w: String,
    /// Height.
    pub h: String,
    /// Fill.
    pub color: &'static str,
    /// Tooltip and accessible text.
    pub title: String,
}

/// One line of a line chart.
#[derive(Clone, Debug)]
pub struct Line {
    /// `x,y x,y …` runs; a gap (no value) starts a new run.
    pub runs: Vec<String>,
    /// Each value: `(x, y, tooltip)`, drawn as a dot so a lone value shows too.
    pub points: Vec<(String, String, String)>,
    /// Stroke.
    pub color: &'static str,
}

/// An axis label.
#[derive(Clone, Debug)]
pub struct Tick {
    /// Position along the axis.
    pub at: String,
    /// Text.
    pub label: String,
}

/// A chart, laid out.
#[derive(Clone, Debug, Template)]
#[template(path = "chart.html")]
pub struct Chart {
    /// Heading.
    pub title: String,
    /// What it shows, for screen readers.
    pub summary: String,
    /// The series, for the legend.
    pub series: Vec<Series>,
    /// Bars (bar charts).
    pub rects: Vec<Rect>,
    /// Lines (line charts).
    pub lines: Vec<Line>,
    /// Value axis labels (y).
    pub y_ticks: Vec<Tick>,
    /// Time axis labels (x).
    pub x_ticks: Vec<Tick>,
    /// No data in the window.
    pub empty: bool,
}

/// Buckets of a window: their start times, `step_seconds` apart, oldest first.
pub fn bucket_starts(since: DateTime<Utc>, step_seconds: i64, count: usize) -> Vec<DateTime<Utc>> {
    let first = since.timestamp().div_euclid(step_seconds) * step_seconds;
    (0..count as i64)
        .filter_map(|i| DateTime::from_timestamp(first + (i + 1) * step_seconds, 0))
        .collect()
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

/// A round upper bound for values up to `max`, and its tick step.
fn scale(max: f64) -> (f64, f64) {
    if max <= 0.0 {
        return (1.0, 0.5);
    }
    let magnitude = 10f64.powf(max.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude / 2.0)
        .find(|s| s * 4.0 >= max)
        .unwrap_or(magnitude * 5.0);
    ((max / step).ceil() * step, step)
}

impl Chart {
    fn frame(
        title: &str,
        summary: String,
        series: Vec<Series>,
        top: f64,
        unit: &dyn Fn(f64) -> String,
        starts: &[DateTime<Utc>],
        empty: bool,
    ) -> Self {
        let (top, step) = scale(top);
        let plot_h = HEIGHT - TOP - BOTTOM;
        let y_ticks = (0..)
            .map(|i| i as f64 * step)
            .take_while(|v| *v <= top + step / 1000.0)
            .map(|v| Tick {
                at: fmt(TOP + plot_h - v / top * plot_h),
                label: unit(v),
            })
            .collect();
        let plot_w = WIDTH - LEFT - RIGHT;
        let every = (starts.len() / 4).max(1);
        let x_ticks = starts
            .iter()
            .enumerate()
            .filter(|(i, _)| i % every == 0)
            .map(|(i, t)| Tick {
                at: fmt(LEFT + (i as f64 + 0.5) * plot_w / starts.len().max(1) as f64),
                label: t.format("%H:%M").to_string(),
            })
            .collect();
        Chart {
            title: title.to_owned(),
            summary,
            series,
            rects: Vec::new(),
            lines: Vec::new(),
            y_ticks,
            x_ticks,
            empty,
        }
    }

    /// Stacked bars: `values[i][s]` is series `s` in bucket `i`.
    pub fn bars(
        title: &str,
        series: Vec<Series>,
        starts: &[DateTime<Utc>],
        values: &[Vec<f64>],
        unit: &dyn Fn(f64) -> String,
    ) -> Self {
        let max = values
            .iter()
            .map(|v| v.iter().sum::<f64>())
            .fold(0.0, f64::max);
        let summary = format!("{title}: bars per time bucket, highest {}", unit(max));
        let mut chart = Self::frame(title, summary, series, max, unit, starts, max <= 0.0);
        let (top, _) = scale(max);
        let plot_h = HEIGHT - TOP - BOTTOM;
        let slot = (WIDTH - LEFT - RIGHT) / starts.len().max(1) as f64;
        for (i, (start, row)) in starts.iter().zip(values).enumerate() {
            let mut base = 0.0;
            for (s, v) in row.iter().enumerate().filter(|(_, v)| **v > 0.0) {
                let h = v / top * plot_h;
                let y = TOP + plot_h - (base + v) / top * plot_h;
                base += v;
                chart.rects.push(Rect {
                    x: fmt(LEFT + i as f64 * slot + slot * 0.12),
                    y: fmt(y),
                    w: fmt(slot * 0.76),
                    h: fmt(h.max(0.5)),
                    color: chart.series[s].color,
                    title: format!(
                        "{} {}: {}",
                        start.format("%H:%M"),
                        chart.series[s].label,
                        unit(*v)
                    ),
                });
            }
        }
        chart
    }

    /// Lines: `values[i][s]` is series `s` in bucket `i`, `None` where there is no value.
    pub fn lines(
        title: &str,
        series: Vec<Series>,
        starts: &[DateTime<Utc>],
        values: &[Vec<Option<f64>>],
        unit: &dyn Fn(f64) -> String,
    ) -> Self {
        let max = values
            .iter()
            .flatten()
            .flatten()
            .copied()
            .fold(0.0, f64::max);
        let any = values.iter().flatten().any(Option::is_some);
        let summary = format!("{title}: lines per time bucket, highest {}", unit(max));
        let mut chart = Self::frame(title, summary, series, max, unit, starts, !any);
        let (top, _) = scale(max);
        let plot_h = HEIGHT - TOP - BOTTOM;
        let slot = (WIDTH - LEFT - RIGHT) / starts.len().max(1) as f64;
        for s in 0..chart.series.len() {
            let mut line = Line {
                runs: vec![String::new()],
                points: Vec::new(),
                color: chart.series[s].color,
            };
            for (i, row) in values.iter().enumerate() {
                match row.get(s).copied().flatten() {
                    Some(v) => {
                        let x = fmt(LEFT + (i as f64 + 0.5) * slot);
                        let y = fmt(TOP + plot_h - v / top * plot_h);
                        let run = line.runs.last_mut().expect("one run at least");
                        run.push_str(&format!("{x},{y} "));
                        let at = starts[i].format("%H:%M");
                        let tip = format!("{at} {}: {}", chart.series[s].label, unit(v));
                        line.points.push((x, y, tip));
                    }
                    None if line.runs.last().is_some_and(|r| !r.is_empty()) => {
                        line.runs.push(String::new())
                    }
                    None => {}
                }
            }
            line.runs.retain(|r| !r.is_empty());
            chart.lines.push(line);
        }
        chart
    }

    /// The bottom of the plot (the x axis), for the template.
    pub fn axis_y(&self) -> String {
        fmt(HEIGHT - BOTTOM)
    }

    /// The left edge of the plot.
    pub fn axis_x(&self) -> String {
        fmt(LEFT)
    }

    /// The right edge of the plot.
    pub fn right(&self) -> String {
        fmt(WIDTH - RIGHT)
    }

    /// Where x labels sit.
    pub fn label_y(&self) -> String {
        fmt(HEIGHT - 8.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_round_and_cover_the_maximum() {
        assert_eq!(scale(0.0), (1.0, 0.5));
        let (top, step) = scale(37.0);
        assert!((37.0..=50.0).contains(&top), "{top}");
        assert_eq!(top % step, 0.0);
        let (top, _) = scale(0.42);
        assert!((0.42..=0.6).contains(&top), "{top}");
    }

    #[test]
    fn bars_stack_and_lines_break_at_gaps() {
        let starts = bucket_starts(Utc::now(), 60, 3);
        let series = vec![
            Series {
                label: "a",
                color: "#000",
            },
            Series {
                label: "b",
                color: "#111",
            },
        ];
        let bars = Chart::bars(
            "t",
            series.clone(),
            &starts,
            &[vec![1.0, 2.0], vec![0.0, 0.0], vec![3.0, 0.0]],
            &|v| format!("{v}"),
        );
        assert_eq!(bars.rects.len(), 3);
        assert!(!bars.empty);
        let lines = Chart::lines(
            "t",
            series,
            &starts,
            &[
                vec![Some(1.0), None],
                vec![None, None],
                vec![Some(2.0), None],
            ],
            &|v| format!("{v}"),
        );
        assert_eq!(lines.lines[0].runs.len(), 2, "a gap splits the line");
        assert!(lines.lines[1].runs.is_empty());
        assert!(lines.render().unwrap().contains("<svg"));
    }
}
