// Draws expert utilisation as a heatmap: one row per layer, one column per expert, each cell
// coloured by that expert's share of the layer's choices (viridis scale, shares from 0 to the
// largest one), with layer and expert labels, a title and a colour bar. PNG or SVG by the file's
// extension, through cairo.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moe::cli {

// Where the cells of an n_layer x n_expert heatmap lie, in pixels (points for SVG).
struct HeatmapLayout {
  double left, top, cell_w, cell_h;
  int width, height;
  double CellCenterX(size_t expert) const { return left + (expert + 0.5) * cell_w; }
  double CellCenterY(size_t layer) const { return top + (layer + 0.5) * cell_h; }
};
HeatmapLayout LayoutFor(size_t n_layer, size_t n_expert);

// The colour of a share t of the scale (0: none, 1: the largest), as 8-bit RGB.
struct Rgb8 {
  int r, g, b;
};
Rgb8 ScaleColour(double t);

// counts[layer][expert]: tokens that chose the expert. Rows may be empty (dense layers).
absl::Status DrawUtilisationHeatmap(const std::vector<std::vector<int64_t>>& counts,
                                    const std::string& title, const std::string& path);

}  // namespace moe::cli
