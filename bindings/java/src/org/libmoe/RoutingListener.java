package org.libmoe;

/**
 * The routing trace ({@link Context#setRoutingListener}): told each processed token's experts in
 * every MoE layer, as the context processes it. A step tells layer 0 for all its tokens, then
 * layer 1, and so on; dense layers tell nothing.
 */
@FunctionalInterface
public interface RoutingListener {
  /**
   * @param position the token's position in the context
   * @param layer the MoE layer
   * @param experts the experts the token ran, best first: the model's top-k of them, -1 where it
   *     ran fewer (under a routing policy or with experts switched off)
   * @param weights their weights (0 where the expert is -1)
   */
  void onRouting(int position, int layer, int[] experts, float[] weights);
}
