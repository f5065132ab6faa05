package org.libmoe;

/** Noise on the router's logits that choose experts ({@code moe_router_noise}). */
public enum RouterNoise {
  /** None (the default). */
  NONE(0),
  /** Gaussian, of the given standard deviation. */
  GAUSSIAN(1),
  /** Gumbel, of the given scale: at 1, the top-k draws experts by their probabilities. */
  GUMBEL(2);

  final int code;

  RouterNoise(int code) {
    this.code = code;
  }
}
