#!/usr/bin/python3
"""Prints the model card's measured tables (markdown) from training_report.json.

    /usr/bin/python3 models/card_tables.py [models/tiny-brown-moe/training_report.json]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "tiny-brown-moe",
                                                              "training_report.json")
    r = json.load(open(path))
    routing = r["routing"]
    layers = routing["layers"]
    n_exp = len(layers[0])
    print(f"Share of top-2 choices per expert ({routing['tokens']} held-out tokens; "
          f"uniform = {100 / n_exp:.1f}%):\n")
    print("| layer | " + " | ".join(f"e{e}" for e in range(n_exp)) + " |")
    print("|---|" + "---|" * n_exp)
    for l, experts in enumerate(layers):
        print(f"| {l} | " + " | ".join(f"{100 * x['chosen_fraction']:.1f}%" for x in experts) + " |")
    print("\nToken classes (base rate over the same tokens): " + ", ".join(
        f"{k} {100 * v:.1f}%" for k, v in sorted(routing["class_base_rate"].items(),
                                                 key=lambda kv: -kv[1])))
    print("\nMost over-represented class among each expert's first-choice tokens "
          "(lift = share at the expert / base rate; lifts of 1.5 and more):\n")
    print("| layer | expert | class | share there | lift |")
    print("|---|---|---|---|---|")
    for l, experts in enumerate(layers):
        for e, x in enumerate(experts):
            if x["lift"] and x["lift"] >= 1.5:
                share = x["class_share"][x["most_over_represented"]]
                print(f"| {l} | e{e} | {x['most_over_represented']} | {100 * share:.1f}% | "
                      f"{x['lift']:.2f} |")


if __name__ == "__main__":
    main()
