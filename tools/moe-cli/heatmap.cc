#include "tools/moe-cli/heatmap.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moe::cli {
namespace {

struct Rgb {
  double r, g, b;
};

// Matplotlib's viridis at nine evenly spaced points: perceptually uniform and readable in grey.
constexpr std::array<Rgb, 9> kViridis = {{{0.267, 0.005, 0.329},
                                          {0.278, 0.175, 0.483},
                                          {0.231, 0.322, 0.546},
                                          {0.173, 0.449, 0.558},
                                          {0.128, 0.567, 0.551},
                                          {0.153, 0.680, 0.504},
                                          {0.360, 0.785, 0.388},
                                          {0.678, 0.864, 0.190},
                                          {0.993, 0.906, 0.144}}};

Rgb Viridis(double t) {
  t = std::clamp(t, 0.0, 1.0) * (kViridis.size() - 1);
  const size_t i = std::min(static_cast<size_t>(t), kViridis.size() - 2);
  const double f = t - static_cast<double>(i);
  const Rgb& a = kViridis[i];
  const Rgb& b = kViridis[i + 1];
  return {a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)};
}

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using Context = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

void Text(cairo_t* cr, double x, double y, const std::string& s, double align = 0) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - align * e.x_advance, y);
  cairo_show_text(cr, s.c_str());
}

constexpr double kRight = 110, kBottom = 62;

}  // namespace

HeatmapLayout LayoutFor(size_t n_layer, size_t n_expert) {
  HeatmapLayout h;
  h.left = 70;
  h.top = 56;
  h.cell_w = std::clamp(720.0 / std::max<size_t>(n_expert, 1), 3.0, 36.0);
  h.cell_h = std::clamp(480.0 / std::max<size_t>(n_layer, 1), 3.0, 28.0);
  h.width = static_cast<int>(std::ceil(h.left + h.cell_w * n_expert + kRight));
  h.height = static_cast<int>(std::ceil(h.top + h.cell_h * n_layer + kBottom));
  return h;
}

Rgb8 ScaleColour(double t) {
  const Rgb c = Viridis(t);
  return {static_cast<int>(std::lround(255 * c.r)), static_cast<int>(std::lround(255 * c.g)),
          static_cast<int>(std::lround(255 * c.b))};
}

absl::Status DrawUtilisationHeatmap(const std::vector<std::vector<int64_t>>& counts,
                                    const std::string& title, const std::string& path) {
  const std::string lower = absl::AsciiStrToLower(path);
  const bool png = absl::EndsWith(lower, ".png"), svg = absl::EndsWith(lower, ".svg");
  if (!png && !svg) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "': the plot is written as .png or .svg"));
  }
  size_t n_expert = 0;
  for (const auto& row : counts) n_expert = std::max(n_expert, row.size());
  const size_t n_layer = counts.size();
  if (n_layer == 0 || n_expert == 0) return absl::InvalidArgumentError("no routing to plot");
  // Each cell is the expert's share of its layer's choices; the scale runs to the largest share.
  std::vector<std::vector<double>> share(n_layer, std::vector<double>(n_expert, 0.0));
  double top = 0;
  for (size_t l = 0; l < n_layer; ++l) {
    double total = 0;
    for (int64_t c : counts[l]) total += static_cast<double>(c);
    for (size_t e = 0; e < counts[l].size() && total > 0; ++e) {
      share[l][e] = static_cast<double>(counts[l][e]) / total;
      top = std::max(top, share[l][e]);
    }
  }
  if (top == 0) top = 1;

  const HeatmapLayout layout = LayoutFor(n_layer, n_expert);
  const double cell_w = layout.cell_w, cell_h = layout.cell_h;
  const double left = layout.left, top_margin = layout.top;
  const double grid_w = cell_w * n_expert, grid_h = cell_h * n_layer;
  const int width = layout.width, height = layout.height;
  Surface surface(svg ? cairo_svg_surface_create(path.c_str(), width, height)
                      : cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height),
                  &cairo_surface_destroy);
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", path,
                     "': ", cairo_status_to_string(cairo_surface_status(surface.get()))));
  }
  Context cr(cairo_create(surface.get()), &cairo_destroy);
  cairo_t* c = cr.get();
  cairo_set_source_rgb(c, 1, 1, 1);
  cairo_paint(c);
  cairo_select_font_face(c, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

  for (size_t l = 0; l < n_layer; ++l) {
    for (size_t e = 0; e < n_expert; ++e) {
      const Rgb col = Viridis(share[l][e] / top);
      cairo_set_source_rgb(c, col.r, col.g, col.b);
      cairo_rectangle(c, left + e * cell_w, top_margin + l * cell_h, cell_w, cell_h);
      cairo_fill(c);
    }
  }
  // Labels: every layer and expert while they fit, else every k-th.
  cairo_set_source_rgb(c, 0, 0, 0);
  cairo_set_font_size(c, 11);
  const size_t layer_step = static_cast<size_t>(std::ceil(13.0 / cell_h));
  for (size_t l = 0; l < n_layer; l += layer_step) {
    Text(c, left - 6, top_margin + (l + 0.5) * cell_h + 4, absl::StrCat(l), 1.0);
  }
  const size_t expert_step = static_cast<size_t>(std::ceil(22.0 / cell_w));
  for (size_t e = 0; e < n_expert; e += expert_step) {
    Text(c, left + (e + 0.5) * cell_w, top_margin + grid_h + 15, absl::StrCat(e), 0.5);
  }
  cairo_set_font_size(c, 13);
  Text(c, left + grid_w / 2, top_margin + grid_h + 38, "expert", 0.5);
  cairo_save(c);
  cairo_translate(c, 24, top_margin + grid_h / 2);
  cairo_rotate(c, -M_PI / 2);
  Text(c, 0, 0, "layer", 0.5);
  cairo_restore(c);
  cairo_set_font_size(c, 15);
  Text(c, left + grid_w / 2, 30, title, 0.5);

  // Colour bar: the share of a layer's choices, 0 to the largest.
  const double bar_x = left + grid_w + 24, bar_w = 16;
  for (int i = 0; i < 100; ++i) {
    const Rgb col = Viridis(1.0 - i / 99.0);
    cairo_set_source_rgb(c, col.r, col.g, col.b);
    cairo_rectangle(c, bar_x, top_margin + grid_h * i / 100.0, bar_w, grid_h / 100.0 + 0.5);
    cairo_fill(c);
  }
  cairo_set_source_rgb(c, 0, 0, 0);
  cairo_set_font_size(c, 11);
  Text(c, bar_x + bar_w + 4, top_margin + 8, absl::StrFormat("%.1f%%", 100 * top));
  Text(c, bar_x + bar_w + 4, top_margin + grid_h, "0%");
  Text(c, bar_x - 4, top_margin + grid_h + 38, "share of", 0);
  Text(c, bar_x - 4, top_margin + grid_h + 52, "the layer", 0);

  cairo_destroy(cr.release());
  if (png && cairo_surface_write_to_png(surface.get(), path.c_str()) != CAIRO_STATUS_SUCCESS) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  }
  cairo_surface_finish(surface.get());
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    return absl::DataLossError(absl::StrCat("writing '", path, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace moe::cli
