package org.libmoe;

import java.util.concurrent.CompletableFuture;

/** One request submitted to an {@link Engine}. */
public final class Request {
  private final Engine engine;
  private final CompletableFuture<RequestResult> result;
  private volatile long id;

  Request(Engine engine, CompletableFuture<RequestResult> result) {
    this.engine = engine;
    this.result = result;
  }

  void setId(long id) {
    this.id = id;
  }

  /** The engine's id of this request. */
  public long id() {
    return id;
  }

  /**
   * Completes when the request ends, however it ends (also cancelled: see {@link
   * RequestResult#finishReason()}). Completes exceptionally with what its listener threw.
   * Cancelling this future cancels the request.
   */
  public CompletableFuture<RequestResult> result() {
    return result;
  }

  /** Ends the request soon; its result then says {@link FinishReason#CANCELLED}. */
  public void cancel() {
    engine.cancel(id);
  }
}
