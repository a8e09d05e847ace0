/** The listener registry shared by the client and groups (emitter.ts). */

import { describe, expect, it, vi } from "vitest";
import { Emitter } from "../src/emitter.js";

type Events = { a: number; b: string };

describe("Emitter", () => {
  it("on returns the function that unsubscribes", () => {
    const em = new Emitter<Events>();
    const seen: number[] = [];
    const off = em.on("a", (v) => seen.push(v));
    em.emit("a", 1);
    off();
    em.emit("a", 2);
    expect(seen).toEqual([1]);
    expect(em.count("a")).toBe(0);
    off(); // twice is harmless
  });

  it("the same function registered twice is two listeners, each removed by its own unsubscribe", () => {
    const em = new Emitter<Events>();
    const fn = vi.fn();
    const off1 = em.on("a", fn);
    em.on("a", fn);
    em.emit("a", 1);
    expect(fn).toHaveBeenCalledTimes(2);
    off1();
    em.emit("a", 2);
    expect(fn).toHaveBeenCalledTimes(3);
  });

  it("keeps events apart", () => {
    const em = new Emitter<Events>();
    const a = vi.fn();
    em.on("a", a);
    em.emit("b", "x");
    expect(a).not.toHaveBeenCalled();
  });

  it("a throwing listener does not stop the others; onListenerError hears it", () => {
    const errors: Array<[unknown, PropertyKey]> = [];
    const em = new Emitter<Events>((e, ev) => errors.push([e, ev]));
    const seen: string[] = [];
    const boom = new Error("boom");
    em.on("a", () => seen.push("first"));
    em.on("a", () => {
      throw boom;
    });
    em.on("a", () => seen.push("third"));
    expect(() => em.emit("a", 1)).not.toThrow();
    expect(seen).toEqual(["first", "third"]);
    expect(errors).toEqual([[boom, "a"]]);
  });

  it("by default a throwing listener is reported on console.error", () => {
    const spy = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const em = new Emitter<Events>();
      em.on("b", () => {
        throw new Error("x");
      });
      em.emit("b", "v");
      expect(spy).toHaveBeenCalledTimes(1);
      expect(String(spy.mock.calls[0]![0])).toContain('"b"');
    } finally {
      spy.mockRestore();
    }
  });

  it("a listener may remove itself during emit; the others still run, once", () => {
    const em = new Emitter<Events>();
    const seen: string[] = [];
    const off = em.on("a", () => {
      seen.push("self");
      off();
    });
    em.on("a", () => seen.push("other"));
    em.emit("a", 1);
    em.emit("a", 2);
    expect(seen).toEqual(["self", "other", "other"]);
  });

  it("a listener removing a later one during emit: that one is not called", () => {
    const em = new Emitter<Events>();
    const seen: string[] = [];
    let offLater = (): void => undefined;
    em.on("a", () => {
      seen.push("first");
      offLater();
    });
    offLater = em.on("a", () => seen.push("later"));
    em.emit("a", 1);
    expect(seen).toEqual(["first"]);
  });

  it("a listener added during emit runs from the next emit on", () => {
    const em = new Emitter<Events>();
    const seen: number[] = [];
    let added = false;
    em.on("a", () => {
      if (!added) {
        added = true;
        em.on("a", (v) => seen.push(v));
      }
    });
    em.emit("a", 1);
    em.emit("a", 2);
    expect(seen).toEqual([2]);
  });
});
