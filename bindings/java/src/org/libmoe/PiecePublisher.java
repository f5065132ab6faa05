package org.libmoe;

import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Flow;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * One engine request's text pieces as a {@link Flow.Publisher} (see {@link Engine#publish}): the
 * request is submitted when its one subscriber subscribes. The engine never waits for a slow
 * subscriber (it serves the other requests in the same steps), so pieces the subscriber has not
 * asked for yet are queued; a request's pieces are bounded by its token limit.
 */
final class PiecePublisher implements Flow.Publisher<String> {
  private final Function<TokenListener, Request> submit;
  private final AtomicBoolean subscribed = new AtomicBoolean();

  PiecePublisher(Function<TokenListener, Request> submit) {
    this.submit = submit;
  }

  @Override
  public void subscribe(Flow.Subscriber<? super String> subscriber) {
    Objects.requireNonNull(subscriber, "subscriber is null");
    if (!subscribed.compareAndSet(false, true)) {
      subscriber.onSubscribe(new Flow.Subscription() {
        @Override
        public void request(long n) {}

        @Override
        public void cancel() {}
      });
      subscriber.onError(
          new IllegalStateException("a request's publisher takes one subscriber"));
      return;
    }
    PieceSubscription s = new PieceSubscription(subscriber);
    subscriber.onSubscribe(s);
    if (s.stopped()) return;  // cancelled (or bad demand) from onSubscribe: nothing submitted
    Request request;
    try {
      request = submit.apply(s::onPiece);
    } catch (RuntimeException e) {  // bad options, a prompt that can never fit, a closed engine
      s.end(e);
      return;
    }
    s.attach(request);
    request.result().whenComplete(
        (result, thrown) -> s.end(thrown != null ? thrown : failure(result)));
  }

  // What a finished request's subscriber is told: nothing for a completion (the token limit, a
  // stop string, a full context, the end of generation), else why it did not complete.
  private static Throwable failure(RequestResult r) {
    switch (r.finishReason()) {
      case ERROR:
        return new MoeException(r.status(), r.message());
      case CANCELLED:
        return new CancellationException("the request was cancelled (or its engine closed)");
      default:
        return null;
    }
  }

  // Signals reach the subscriber one at a time, from whichever thread has work for it: the
  // engine's (a piece or the end, while there is demand) or the one calling request(n).
  private static final class PieceSubscription implements Flow.Subscription {
    private final Flow.Subscriber<? super String> subscriber;
    private final ConcurrentLinkedQueue<String> pieces = new ConcurrentLinkedQueue<>();
    private final AtomicLong demand = new AtomicLong();
    private final AtomicInteger drains = new AtomicInteger();  // work missed while draining
    private volatile Request request;
    private volatile boolean ended;  // the request finished (end holds why)
    private volatile Throwable end;
    private volatile Throwable badDemand;  // request(n) with n <= 0 (Reactive Streams rule 3.9)
    private volatile boolean done;  // the last signal was sent
    private volatile boolean cancelled;  // by the subscriber

    PieceSubscription(Flow.Subscriber<? super String> subscriber) {
      this.subscriber = subscriber;
    }

    void attach(Request r) {
      request = r;
      if (stopped()) r.cancel();  // stopped before its id was known
    }

    // The request's listener: false (stop generating) once nobody will take its pieces.
    boolean onPiece(int token, String piece) {
      if (stopped()) return false;
      if (!piece.isEmpty()) {
        pieces.add(piece);
        drain();
      }
      return !stopped();
    }

    void end(Throwable why) {
      end = why;
      ended = true;
      drain();
    }

    @Override
    public void request(long n) {
      if (n <= 0) {
        badDemand = new IllegalArgumentException("request(" + n + "): demand must be positive");
        stopRequest();
      } else {
        demand.getAndAccumulate(n, (a, b) -> a + b < 0 ? Long.MAX_VALUE : a + b);
      }
      drain();
    }

    @Override
    public void cancel() {
      cancelled = true;
      stopRequest();
    }

    boolean stopped() {
      return cancelled || done || badDemand != null;
    }

    private void stopRequest() {
      Request r = request;
      if (r != null) r.cancel();
    }

    private void drain() {
      if (drains.getAndIncrement() != 0) return;
      int missed = 1;
      do {
        long sent = 0;
        final long wanted = demand.get();
        for (;;) {
          if (cancelled || done) {
            pieces.clear();
            break;
          }
          if (badDemand != null) {
            signalEnd(badDemand);
            break;
          }
          if (sent == wanted) {
            if (ended && pieces.isEmpty()) signalEnd(end);
            break;
          }
          String piece = pieces.poll();
          if (piece == null) {
            if (ended) signalEnd(end);
            break;
          }
          if (!deliver(piece)) break;
          ++sent;
        }
        if (sent != 0 && wanted != Long.MAX_VALUE) demand.addAndGet(-sent);
        missed = drains.addAndGet(-missed);
      } while (missed != 0);
    }

    // onNext; a subscriber that throws (against Reactive Streams rule 2.13) is cancelled and its
    // exception goes to the thread's uncaught-exception handler, not into the engine.
    private boolean deliver(String piece) {
      try {
        subscriber.onNext(piece);
        return true;
      } catch (Throwable t) {
        cancel();
        Thread self = Thread.currentThread();
        self.getUncaughtExceptionHandler().uncaughtException(self, t);
        return false;
      }
    }

    // The last signal: onComplete, or onError with why.
    private void signalEnd(Throwable why) {
      done = true;
      pieces.clear();
      if (why != null) {
        subscriber.onError(why);
      } else {
        subscriber.onComplete();
      }
    }
  }
}
