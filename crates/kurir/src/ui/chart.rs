//! Charts as SVG drawn on the server: stacked bars and lines over the buckets of a time window,
//! laid out here and drawn by the `chart.html` template. No script and no chart library: a
//! chart is a few dozen rectangles or one polyline per series, with its figures in `<title>`s
//! for screen readers and tooltips. The value axis is in the unit that fits the largest value
//! (`3/min` rather than `0.05/s`), with ticks 1, 2 or 5 × 10^n apart.

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

/// What a chart's values measure, in the unit they are given in. The chart shows them in the
/// unit that fits its largest value ([`Measure::unit_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// A rate, given per second.
    Rate,
    /// A percentage, 0 to 100.
    Percent,
    /// A duration, given in milliseconds.
    Millis,
}

/// A unit to show values in: its suffix and how many given units make one of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unit {
    /// Written after the number.
    pub suffix: &'static str,
    /// One of this unit in the measure's given unit.
    pub size: f64,
}

const fn unit(suffix: &'static str, size: f64) -> Unit {
    Unit { suffix, size }
}

impl Measure {
    /// The units to choose from, smallest first.
    fn units(self) -> &'static [Unit] {
        const RATE: [Unit; 3] = [
            unit("/h", 1.0 / 3600.0),
            unit("/min", 1.0 / 60.0),
            unit("/s", 1.0),
        ];
        const PERCENT: [Unit; 1] = [unit(" %", 1.0)];
        const MILLIS: [Unit; 4] = [
            unit(" ms", 1.0),
            unit(" s", 1000.0),
            unit(" min", 60_000.0),
            unit(" h", 3_600_000.0),
        ];
        match self {
            Self::Rate => &RATE,
            Self::Percent => &PERCENT,
            Self::Millis => &MILLIS,
        }
    }

    /// The largest unit in which `max` is at least 1 (the smallest when none is): three events
    /// a minute read `3/min`, not `0.05/s`; four and a half minutes read `4.5 min`.
    pub fn unit_for(self, max: f64) -> Unit {
        let units = self.units();
        units
            .iter()
            .rev()
            .find(|u| max / u.size >= 1.0)
            .copied()
            .unwrap_or(units[0])
    }

    /// `value` alone, in the unit that fits it, to three significant figures: `3/h`, `2.5/s`,
    /// `12.5 s`. A small rate keeps its figures (`0.0417/h`) instead of rounding to zero.
    pub fn text(self, value: f64) -> String {
        let unit = self.unit_for(value);
        format!("{}{}", significant(value / unit.size), unit.suffix)
    }
}

/// `v` to three significant figures without trailing zeros: `3`, `0.5`, `12.5`, `0.0123`, `1234`.
fn significant(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".to_owned();
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    let text = format!("{v:.decimals$}");
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_owned(),
        false => text,
    }
}

/// A round upper bound for values up to `max`, and its tick step: the step is 1, 2 or 5 × 10^n,
/// the smallest that covers `max` in at most five intervals.
fn scale(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.5);
    }
    let rough = max / 5.0;
    let magnitude = 10f64.powi(rough.log10().floor() as i32);
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough * (1.0 - 1e-9))
        .unwrap_or(magnitude * 10.0);
    ((max / step - 1e-9).ceil().max(1.0) * step, step)
}

/// The value axis: its unit, its top and step in that unit, and the decimals its labels need.
#[derive(Clone, Copy, Debug)]
struct Axis {
    unit: Unit,
    top: f64,
    step: f64,
    decimals: usize,
}

impl Axis {
    fn new(measure: Measure, max: f64) -> Self {
        let unit = measure.unit_for(max);
        let (top, step) = scale(max / unit.size);
        let decimals = (-(step.log10() + 1e-9).floor()).max(0.0) as usize;
        Self {
            unit,
            top,
            step,
            decimals,
        }
    }

    /// Where `value` (in the measure's given unit) sits, from 0 (bottom) to 1 (top).
    fn share(&self, value: f64) -> f64 {
        value / self.unit.size / self.top
    }

    /// The ticks: `(share of the height, label)`, all with the same decimals.
    fn ticks(&self) -> Vec<(f64, String)> {
        let intervals = (self.top / self.step).round() as usize;
        (0..=intervals)
            .map(|i| {
                let v = i as f64 * self.step;
                let label = format!("{v:.*}{}", self.decimals, self.unit.suffix);
                (v / self.top, label)
            })
            .collect()
    }

    /// `value` in the axis's unit, for a tooltip.
    fn text(&self, value: f64) -> String {
        format!(
            "{}{}",
            significant(value / self.unit.size),
            self.unit.suffix
        )
    }
}

impl Chart {
    fn frame(
        title: &str,
        summary: String,
        series: Vec<Series>,
        axis: &Axis,
        starts: &[DateTime<Utc>],
        empty: bool,
    ) -> Self {
        let plot_h = HEIGHT - TOP - BOTTOM;
        let y_ticks = axis
            .ticks()
            .into_iter()
            .map(|(share, label)| Tick {
                at: fmt(TOP + plot_h - share * plot_h),
                label,
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

    /// Stacked bars: `values[i][s]` is series `s` in bucket `i`, in `measure`'s given unit.
    pub fn bars(
        title: &str,
        series: Vec<Series>,
        starts: &[DateTime<Utc>],
        values: &[Vec<f64>],
        measure: Measure,
    ) -> Self {
        let max = values
            .iter()
            .map(|v| v.iter().sum::<f64>())
            .fold(0.0, f64::max);
        let axis = Axis::new(measure, max);
        let summary = format!("{title}: bars per time bucket, highest {}", axis.text(max));
        let mut chart = Self::frame(title, summary, series, &axis, starts, max <= 0.0);
        let plot_h = HEIGHT - TOP - BOTTOM;
        let slot = (WIDTH - LEFT - RIGHT) / starts.len().max(1) as f64;
        for (i, (start, row)) in starts.iter().zip(values).enumerate() {
            let mut base = 0.0;
            for (s, v) in row.iter().enumerate().filter(|(_, v)| **v > 0.0) {
                let h = axis.share(*v) * plot_h;
                let y = TOP + plot_h - axis.share(base + v) * plot_h;
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
                        axis.text(*v)
                    ),
                });
            }
        }
        chart
    }

    /// Lines: `values[i][s]` is series `s` in bucket `i`, in `measure`'s given unit, `None`
    /// where there is no value.
    pub fn lines(
        title: &str,
        series: Vec<Series>,
        starts: &[DateTime<Utc>],
        values: &[Vec<Option<f64>>],
        measure: Measure,
    ) -> Self {
        let max = values
            .iter()
            .flatten()
            .flatten()
            .copied()
            .fold(0.0, f64::max);
        let any = values.iter().flatten().any(Option::is_some);
        let axis = Axis::new(measure, max);
        let summary = format!("{title}: lines per time bucket, highest {}", axis.text(max));
        let mut chart = Self::frame(title, summary, series, &axis, starts, !any);
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
                        let y = fmt(TOP + plot_h - axis.share(v) * plot_h);
                        let run = line.runs.last_mut().expect("one run at least");
                        run.push_str(&format!("{x},{y} "));
                        let at = starts[i].format("%H:%M");
                        let tip = format!("{at} {}: {}", chart.series[s].label, axis.text(v));
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

    /// Regression (issue 33, item 4): steps of 2.5 × 10^n made uneven labels once rounded.
    #[test]
    fn ticks_step_by_one_two_or_five_times_a_power_of_ten_and_cover_the_maximum() {
        for max in [
            0.007, 0.05, 0.42, 1.0, 3.0, 7.5, 37.0, 99.0, 100.0, 288.0, 1234.0, 5e6,
        ] {
            let (top, step) = scale(max);
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
                "{max}: a step of {step}"
            );
            let intervals = top / step;
            assert!(
                (intervals - intervals.round()).abs() < 1e-9,
                "{max}: {top} is not a whole number of {step} steps"
            );
            assert!(
                (2.0..=5.0).contains(&intervals.round()),
                "{max}: {intervals} intervals"
            );
            assert!(top >= max && top - step < max, "{max}: top {top}");
        }
    }

    fn labels(max: f64, measure: Measure) -> Vec<String> {
        Axis::new(measure, max)
            .ticks()
            .into_iter()
            .map(|(_, label)| label)
            .collect()
    }

    /// Regression (issue 33, item 4): three events a minute read `0.05/0.04/0.03/0.01/0.00/s`,
    /// and latencies of a few minutes `5 min/3 min/2 min/0 ms`.
    #[test]
    fn the_axis_unit_fits_the_largest_value_and_labels_share_their_decimals() {
        assert_eq!(
            labels(0.05, Measure::Rate),
            ["0/min", "1/min", "2/min", "3/min"]
        );
        assert_eq!(
            labels(0.5, Measure::Rate),
            ["0/min", "10/min", "20/min", "30/min"]
        );
        assert_eq!(
            labels(1.5, Measure::Rate),
            ["0.0/s", "0.5/s", "1.0/s", "1.5/s"]
        );
        assert_eq!(
            labels(2.0 / 3600.0, Measure::Rate),
            ["0.0/h", "0.5/h", "1.0/h", "1.5/h", "2.0/h"]
        );
        assert_eq!(
            labels(288_000.0, Measure::Millis),
            ["0 min", "1 min", "2 min", "3 min", "4 min", "5 min"]
        );
        assert_eq!(
            labels(950.0, Measure::Millis),
            ["0 ms", "200 ms", "400 ms", "600 ms", "800 ms", "1000 ms"]
        );
        assert_eq!(
            labels(12_500.0, Measure::Millis),
            ["0 s", "5 s", "10 s", "15 s"]
        );
        assert_eq!(
            labels(100.0, Measure::Percent),
            ["0 %", "20 %", "40 %", "60 %", "80 %", "100 %"]
        );
    }

    /// Regression (issue 33, item 4): a quiet hour's rate printed as `0.00 / s`.
    #[test]
    fn a_low_rate_never_reads_as_zero() {
        assert_eq!(Measure::Rate.text(3.0 / 3600.0), "3/h");
        assert_eq!(Measure::Rate.text(0.05), "3/min");
        assert_eq!(Measure::Rate.text(0.5 / 60.0), "30/h");
        assert_eq!(Measure::Rate.text(2.5), "2.5/s");
        assert_eq!(Measure::Rate.text(1.0 / 86_400.0), "0.0417/h");
        assert_eq!(Measure::Rate.text(0.0), "0/h");
        assert_eq!(Measure::Millis.text(12_500.0), "12.5 s");
        assert_eq!(Measure::Millis.text(850.0), "850 ms");
    }

    #[test]
    fn ticks_are_evenly_spaced_from_the_axis_to_the_top() {
        let starts = bucket_starts(Utc::now(), 60, 3);
        let series = vec![Series {
            label: "a",
            color: "#000",
        }];
        let rows = [vec![0.01], vec![0.03], vec![0.05]];
        let chart = Chart::bars("t", series, &starts, &rows, Measure::Rate);
        let at: Vec<f64> = chart
            .y_ticks
            .iter()
            .map(|t| t.at.parse().unwrap())
            .collect();
        assert_eq!(at.first().copied(), Some(HEIGHT - BOTTOM));
        assert_eq!(at.last().copied(), Some(TOP));
        let gap = at[0] - at[1];
        assert!(
            at.windows(2).all(|w| (w[0] - w[1] - gap).abs() < 0.11),
            "{at:?}"
        );
        assert_eq!(chart.rects[0].title.split(": ").last(), Some("0.6/min"));
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
            Measure::Rate,
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
            Measure::Percent,
        );
        assert_eq!(lines.lines[0].runs.len(), 2, "a gap splits the line");
        assert!(lines.lines[1].runs.is_empty());
        assert!(lines.render().unwrap().contains("<svg"));
    }
}
