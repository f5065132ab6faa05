// The utilisation heatmap draws each (layer, expert) cell in the colour of its share of the
// layer's choices, on the scale from 0 to the largest share, as PNG and as SVG, and refuses what
// it cannot write.
#include "tools/moe-cli/heatmap.h"

#include <cairo.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace moe::cli {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / (std::to_string(::getpid()) + "_" + name)).string();
}

struct Pixel {
  int r, g, b;
};

Pixel At(cairo_surface_t* s, double x, double y) {
  const unsigned char* data = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  uint32_t v;
  std::memcpy(&v, data + static_cast<int>(y) * stride + 4 * static_cast<int>(x), 4);
  return {static_cast<int>((v >> 16) & 0xff), static_cast<int>((v >> 8) & 0xff),
          static_cast<int>(v & 0xff)};
}

void ExpectColour(const Pixel& p, const Rgb8& want, const std::string& where) {
  EXPECT_NEAR(p.r, want.r, 1) << where;
  EXPECT_NEAR(p.g, want.g, 1) << where;
  EXPECT_NEAR(p.b, want.b, 1) << where;
}

TEST(HeatmapTest, CellsTakeTheColourOfTheirShare) {
  // Layer 0: expert 0 takes everything (the scale's top); layer 1: all four alike (a quarter);
  // layer 2: no routed tokens (a dense layer).
  const std::vector<std::vector<int64_t>> counts = {{10, 0, 0, 0}, {3, 3, 3, 3}, {}};
  const std::string path = TempPath("heatmap.png");
  ASSERT_TRUE(DrawUtilisationHeatmap(counts, "test", path).ok());
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  ASSERT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  const HeatmapLayout layout = LayoutFor(3, 4);
  EXPECT_EQ(cairo_image_surface_get_width(s), layout.width);
  EXPECT_EQ(cairo_image_surface_get_height(s), layout.height);
  ExpectColour(At(s, layout.CellCenterX(0), layout.CellCenterY(0)), ScaleColour(1.0), "top");
  for (size_t e = 1; e < 4; ++e) {
    ExpectColour(At(s, layout.CellCenterX(e), layout.CellCenterY(0)), ScaleColour(0.0), "zero");
  }
  for (size_t e = 0; e < 4; ++e) {
    ExpectColour(At(s, layout.CellCenterX(e), layout.CellCenterY(1)), ScaleColour(0.25), "quarter");
    ExpectColour(At(s, layout.CellCenterX(e), layout.CellCenterY(2)), ScaleColour(0.0), "dense");
  }
  // The scale's ends are far apart: a cell that took the wrong share would not pass above.
  EXPECT_GT(std::abs(ScaleColour(1.0).g - ScaleColour(0.25).g), 60);
  cairo_surface_destroy(s);
  std::remove(path.c_str());
}

TEST(HeatmapTest, SvgIsWrittenAndBadRequestsAreRefused) {
  const std::vector<std::vector<int64_t>> counts = {{1, 2}, {2, 1}};
  const std::string svg = TempPath("heatmap.svg");
  ASSERT_TRUE(DrawUtilisationHeatmap(counts, "svg", svg).ok());
  std::ifstream f(svg);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("<svg"), std::string::npos);
  EXPECT_NE(text.str().find("</svg>"), std::string::npos);
  std::remove(svg.c_str());
  EXPECT_EQ(DrawUtilisationHeatmap(counts, "x", TempPath("heatmap.bmp")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DrawUtilisationHeatmap({}, "x", TempPath("empty.png")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DrawUtilisationHeatmap(counts, "x", "/nonexistent/dir/h.png").ok());
  EXPECT_FALSE(DrawUtilisationHeatmap(counts, "x", "/nonexistent/dir/h.svg").ok());
}

}  // namespace
}  // namespace moe::cli
