//! SVG charts of a report (plotters, SVG backend only): per database, deliveries/s over time for
//! every scenario run, and the commit→receipt latency distribution (CDF, log scale).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::{DatabaseRun, Report, ScenarioResult};

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Writes `<backend>-rates.svg` and `<backend>-latency.svg` into `dir`; returns the files.
pub fn write(report: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    for db in &report.databases {
        let rates = dir.join(format!("{}-rates.svg", db.backend));
        if rate_chart(db, &rates)? {
            files.push(rates);
        }
        let latency = dir.join(format!("{}-latency.svg", db.backend));
        if latency_chart(db, &latency)? {
            files.push(latency);
        }
    }
    Ok(files)
}

fn title(r: &ScenarioResult) -> String {
    format!("{} {}", r.scenario, r.label)
}

fn rate_chart(db: &DatabaseRun, path: &Path) -> anyhow::Result<bool> {
    let runs: Vec<&ScenarioResult> = db
        .results
        .iter()
        .filter(|r| !r.rate_series.is_empty())
        .collect();
    if runs.is_empty() {
        return Ok(false);
    }
    let cols = 2;
    let rows = runs.len().div_ceil(cols);
    let root = SVGBackend::new(path, (1100, 300 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((rows, cols));
    for (i, (r, area)) in runs.iter().zip(areas.iter()).enumerate() {
        let x_max = r.rate_series.last().map_or(1.0, |p| p[0] + 0.5);
        let y_max = r.rate_series.iter().map(|p| p[1]).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{} · {}", db.backend, title(r)), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("deliveries/s")
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        chart.draw_series(LineSeries::new(
            r.rate_series.iter().map(|p| (p[0], p[1])),
            PALETTE[i % PALETTE.len()].stroke_width(2),
        ))?;
    }
    root.present()?;
    Ok(true)
}

fn latency_chart(db: &DatabaseRun, path: &Path) -> anyhow::Result<bool> {
    let runs: Vec<&ScenarioResult> = db
        .results
        .iter()
        .filter(|r| !r.latency_cdf.is_empty())
        .collect();
    if runs.is_empty() {
        return Ok(false);
    }
    let x_max = runs
        .iter()
        .flat_map(|r| r.latency_cdf.iter().map(|p| p[0]))
        .fold(1.0, f64::max)
        * 1.2;
    let root = SVGBackend::new(path, (1100, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{} · commit→receipt latency (CDF)", db.backend),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((0.1..x_max).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("milliseconds (log scale)")
        .y_desc("fraction of deliveries")
        .draw()?;
    for (i, r) in runs.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                r.latency_cdf.iter().map(|p| (p[0].max(0.1), p[1])),
                color.stroke_width(2),
            ))?
            .label(title(r))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(true)
}
