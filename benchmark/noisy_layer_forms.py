"""Rainbow's noisy layer two ways, on this CPU: factorised (rainbow_atari_envpool.py: x mu^T + f(eps_out) * ((x *
f(eps_in)) sigma^T), no noisy weight formed) against formed (CleanRL's rainbow_atari.py: w = mu + sigma * f(eps_out)
f(eps_in)^T at every call, then one product). One 3136 x 512 layer, fp32, at the script's shapes:

  - a gradient step's three batch-32 passes: two without gradient (the target network, the online network on the
    next observations), one with its backward (the online network on the observations);
  - acting on one observation.

    python benchmark/noisy_layer_forms.py               # torch's default threads
    python benchmark/noisy_layer_forms.py --threads 1

Each form is timed three times, alternately; the best of the three is printed. Pause other work while it runs."""

import argparse
import math
import time

import torch
import torch.nn.functional as F

IN, OUT, BATCH = 3136, 512, 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if not 0 <= args.threads <= 1024:
        raise SystemExit(f"error: --threads must be in 0..1024 (0: torch's default), got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bound = 1 / math.sqrt(IN)
    mu = torch.empty(OUT, IN).uniform_(-bound, bound).requires_grad_()
    sigma = torch.full((OUT, IN), 0.5 / math.sqrt(IN)).requires_grad_()
    bias_mu, bias_sigma = torch.zeros(OUT, requires_grad=True), torch.full((OUT,), 0.5 / math.sqrt(OUT), requires_grad=True)
    eps_in, eps_out = torch.randn(IN), torch.randn(OUT)
    x = torch.randn(BATCH, IN, requires_grad=True)

    def factorised(x):
        return F.linear(x, mu, bias_mu + bias_sigma * eps_out) + F.linear(x * eps_in, sigma) * eps_out

    def formed(x):
        return F.linear(x, mu + sigma * torch.outer(eps_out, eps_in), bias_mu + bias_sigma * eps_out)

    assert torch.allclose(factorised(x), formed(x), rtol=1e-4, atol=1e-5)  # the same layer

    def gradient_step(layer):
        with torch.no_grad():
            layer(x.detach()), layer(x.detach())
        layer(x).sum().backward()

    def acting(layer):
        with torch.no_grad():
            layer(x.detach()[:1])

    print(f"torch threads: {torch.get_num_threads()}; one {IN} x {OUT} noisy layer, fp32")
    for label, work, repeats in (
        ("a gradient step's passes (batch 32)", gradient_step, 30),
        ("acting (batch 1)", acting, 300),
    ):
        best = {}
        for name, layer in (("factorised", factorised), ("formed", formed)) * 3:
            for _ in range(3):
                work(layer)
            start = time.perf_counter()
            for _ in range(repeats):
                work(layer)
            best[name] = min(best.get(name, math.inf), (time.perf_counter() - start) / repeats * 1e3)
        print(f"{label}: factorised {best['factorised']:.2f} ms, formed {best['formed']:.2f} ms")


if __name__ == "__main__":
    main()
