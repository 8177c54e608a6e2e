//! Plots of a benchmark run (PNG and SVG): tok/s vs prompt length, and
//! decode ms/token vs context, with the peer and the bandwidth limit drawn
//! on the same axes.
//!
//! Text needs a TrueType font: `KILN_PLOT_FONT`, else a few usual system
//! paths (DejaVu, Liberation, Noto). No system font library is used.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::engine::ConfigResult;
use super::peer::Peer;
use super::report::{limit_tok_s, RunMeta};

const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Registers a TrueType font as `sans-serif` (once per process).
fn ensure_font() -> Result<()> {
    static FONT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let r = FONT.get_or_init(|| {
        let env = std::env::var_os("KILN_PLOT_FONT").map(PathBuf::from);
        let candidates = env.into_iter().chain(FONT_PATHS.iter().map(PathBuf::from));
        for p in candidates {
            if let Ok(bytes) = std::fs::read(&p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(p);
                }
            }
        }
        Err("no TrueType font found for plot text; set KILN_PLOT_FONT=/path/to/font.ttf".into())
    });
    r.as_ref().map(|_| ()).map_err(|e| anyhow!("{e}"))
}

/// One line on a chart.
#[derive(Debug, Clone)]
struct Series {
    name: String,
    color: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// A chart: title, axis labels and lines (both axes linear, from 0).
#[derive(Debug, Clone)]
struct Chart {
    title: String,
    x_label: &'static str,
    y_label: &'static str,
    series: Vec<Series>,
}

const KILN: RGBColor = RGBColor(0xd9, 0x5f, 0x02);
const KILN2: RGBColor = RGBColor(0x75, 0x70, 0xb3);
const PEER: RGBColor = RGBColor(0x1b, 0x9e, 0x77);
const PEER2: RGBColor = RGBColor(0x66, 0xa6, 0x1e);
const LIMIT: RGBColor = RGBColor(0x55, 0x55, 0x55);

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Chart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing a chart: {e}");
    root.fill(&WHITE).map_err(e)?;
    let pts = c.series.iter().flat_map(|s| s.points.iter()).filter(|p| p.0 > 0.0 && p.1.is_finite());
    let (mut x1, mut y1) = (0.0f64, 0.0f64);
    for &(x, y) in pts {
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !(x1 > 0.0 && y1 > 0.0) {
        bail!("nothing to plot for '{}'", c.title);
    }
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x1 * 1.08, 0.0..y1 * 1.15)
        .map_err(e)?;
    chart.configure_mesh().x_desc(c.x_label).y_desc(c.y_label).label_style(("sans-serif", 14)).draw().map_err(e)?;
    for s in &c.series {
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.0 > 0.0 && p.1.is_finite()).collect();
        if pts.is_empty() {
            continue;
        }
        let color = s.color;
        let style = color.stroke_width(2);
        let anno = if s.dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style)).map_err(e)?
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style)).map_err(e)?
        };
        anno.label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// The file name of a model path (titles stay short).
fn short(model: &str) -> &str {
    Path::new(model).file_name().and_then(|s| s.to_str()).unwrap_or(model)
}

fn sorted(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// tok/s vs prompt length.
fn throughput_chart(meta: &RunMeta, results: &[ConfigResult], peer: Option<&Peer>) -> Chart {
    let main: Vec<&ConfigResult> = results.iter().filter(|r| !r.shape.sweep).collect();
    let mut series = vec![
        Series {
            name: "kiln prefill".into(),
            color: KILN,
            dashed: false,
            points: sorted(main.iter().map(|r| (r.shape.prompt as f64, r.prefill_tok_s.p50)).collect()),
        },
        Series {
            name: "kiln decode".into(),
            color: KILN2,
            dashed: false,
            points: sorted(main.iter().map(|r| (r.shape.prompt as f64, r.decode_tok_s.p50)).collect()),
        },
    ];
    if let Some(p) = peer {
        let pp = p
            .points
            .iter()
            .filter(|x| x.n_gen == 0 && x.n_depth == 0 && x.n_prompt > 0)
            .map(|x| (x.n_prompt as f64, x.avg_ts))
            .collect();
        let tg = p
            .points
            .iter()
            .filter(|x| x.n_prompt == 0 && x.n_gen > 0 && x.n_depth > 0)
            .map(|x| (x.n_depth as f64, x.avg_ts))
            .collect();
        series.push(Series { name: format!("{} prefill", p.name), color: PEER, dashed: true, points: sorted(pp) });
        series.push(Series {
            name: format!("{} decode (at depth)", p.name),
            color: PEER2,
            dashed: true,
            points: sorted(tg),
        });
    }
    Chart {
        title: format!(
            "{}: tok/s vs prompt length ({} threads, KV {})",
            short(&meta.model),
            meta.threads,
            meta.kv_cache
        ),
        x_label: "prompt tokens",
        y_label: "tokens / s",
        series,
    }
}

/// Decode ms/token vs context.
fn context_chart(meta: &RunMeta, results: &[ConfigResult], peer: Option<&Peer>) -> Chart {
    let mut series = vec![Series {
        name: "kiln decode".into(),
        color: KILN,
        dashed: false,
        points: sorted(results.iter().map(|r| (r.decode_context(), r.decode_ms_per_token.p50)).collect()),
    }];
    if let Some(p) = peer {
        series.push(Series { name: format!("{} decode", p.name), color: PEER, dashed: true, points: p.decode_curve() });
    }
    let limit: Vec<(f64, f64)> =
        results.iter().filter_map(|r| limit_tok_s(meta, r).map(|l| (r.decode_context(), 1e3 / l))).collect();
    if !limit.is_empty() {
        series.push(Series { name: "bandwidth limit".into(), color: LIMIT, dashed: true, points: sorted(limit) });
    }
    Chart {
        title: format!(
            "{}: decode ms/token vs context ({} threads, KV {})",
            short(&meta.model),
            meta.threads,
            meta.kv_cache
        ),
        x_label: "context tokens",
        y_label: "ms / token",
        series,
    }
}

fn write_chart(dir: &Path, stem: &str, c: &Chart) -> Result<Vec<PathBuf>> {
    let (w, h) = (960u32, 600u32);
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    draw(&BitMapBackend::new(&png, (w, h)).into_drawing_area(), c)
        .with_context(|| format!("writing {}", png.display()))?;
    draw(&SVGBackend::new(&svg, (w, h)).into_drawing_area(), c)
        .with_context(|| format!("writing {}", svg.display()))?;
    Ok(vec![png, svg])
}

/// Writes both charts as PNG and SVG into `dir`; returns the files written.
pub(crate) fn write_all(
    dir: &Path,
    meta: &RunMeta,
    results: &[ConfigResult],
    peer: Option<&Peer>,
) -> Result<Vec<PathBuf>> {
    ensure_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = write_chart(dir, "tok_s_vs_prompt", &throughput_chart(meta, results, peer))?;
    out.extend(write_chart(dir, "ms_per_token_vs_context", &context_chart(meta, results, peer))?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::bandwidth::Bandwidth;
    use crate::bench::engine::{Sample, Shape};
    use crate::bench::system::Machine;

    fn fixture() -> (RunMeta, Vec<ConfigResult>) {
        let meta = RunMeta {
            model: "tiny".into(),
            backend: "kiln-cpu".into(),
            threads: 2,
            pinned_threads: false,
            attention: "f32",
            cpu_isa: "avx2",
            kv_cache: "f16/f16".into(),
            prefill_chunk: 512,
            seed: 42,
            streams: 1,
            weight_bytes_per_token: 80_000_000,
            kv_bytes_per_token: 46_080,
            flops_per_token: 2.7e8,
            machine: Machine { cpu: "cpu".into(), cores: 2, load_avg: [0.0; 3] },
            bandwidth: Some(Bandwidth { copy_gb_s: 10.0, read_gb_s: 12.0, threads: 2, buffer_mib: 8 }),
        };
        let r = |p: usize, dec: f64, sweep: bool| {
            let s = Sample {
                ttft_ms: p as f64,
                prefill_tok_s: 400.0 + p as f64 / 10.0,
                decode_tok_s: dec,
                itl_ms: vec![1e3 / dec],
                cached_tokens: 0,
                gen_tokens: 8,
            };
            ConfigResult::from_samples(Shape { prompt: p, gen: 8, iterations: 1, sweep }, &[s], None)
        };
        (meta, vec![r(128, 100.0, false), r(512, 90.0, false), r(2048, 60.0, false), r(1024, 75.0, true)])
    }

    #[test]
    fn writes_png_and_svg_with_peer() -> Result<()> {
        let (meta, results) = fixture();
        let peer = Peer::parse(
            "llama.cpp",
            r#"[{"n_prompt":128,"n_gen":0,"n_depth":0,"avg_ts":900.0},{"n_prompt":0,"n_gen":128,"n_depth":128,"avg_ts":120.0},{"n_prompt":0,"n_gen":128,"n_depth":2048,"avg_ts":70.0}]"#,
        )?;
        let dir = tempfile::tempdir()?;
        let files = write_all(dir.path(), &meta, &results, Some(&peer))?;
        assert_eq!(files.len(), 4);
        for f in &files {
            let bytes = std::fs::read(f)?;
            assert!(bytes.len() > 1000, "{} is too small", f.display());
        }
        let png = std::fs::read(&files[0])?;
        assert_eq!(png.get(..4), Some(&b"\x89PNG"[..]));
        let svg = std::fs::read_to_string(&files[3])?;
        assert!(
            svg.contains("<svg") && svg.contains("bandwidth limit") && svg.contains("llama.cpp decode"),
            "legend missing"
        );
        Ok(())
    }

    #[test]
    fn charts_hold_the_expected_series() {
        let (meta, results) = fixture();
        let t = throughput_chart(&meta, &results, None);
        assert_eq!(t.series.len(), 2);
        assert_eq!(t.series[0].points.len(), 3, "sweep points are not prompt-length points");
        let c = context_chart(&meta, &results, None);
        assert_eq!(c.series[0].points.len(), 4);
        assert_eq!(c.series[0].points[0], (132.0, 10.0));
        assert_eq!(c.series.last().map(|s| s.name.as_str()), Some("bandwidth limit"));
        assert_eq!(short("/a/b/m.gguf"), "m.gguf");
        assert_eq!(short("smollm2"), "smollm2");
    }
}
