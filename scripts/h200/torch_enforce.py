"""PyTorch half of the H200 enforcement plan (docs/enforcement.md).

Modes (key=value output, one line per result):
  mem                 allocate 256 MiB tensors until OOM; report the error type,
                      memory_reserved() and mem_get_info()
  matmul <seconds>    4096x4096 fp16 matmul loop; iterations/s and TFLOP/s
  resnet <seconds> [batch] [start_at]
                      ResNet50 fp16 inference, random weights (no download),
                      batch 8 by default; images/s. With start_at (Unix time)
                      the timed loop starts then, after the model is built and
                      warm, so that several replicas run side by side.
"""
import sys
import time


def mem():
    import torch
    free0, total0 = torch.cuda.mem_get_info()
    print(f"mem_get_info_free={free0} mem_get_info_total={total0}")
    held = []
    err = "none"
    try:
        while len(held) < 4096:
            held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:  # The clean outcome.
        err = "OutOfMemoryError"
        msg = str(e).splitlines()[0][:160]
        print(f"oom_message=\"{msg}\"")
    except RuntimeError as e:  # "unknown error" and friends: a failure.
        err = "RuntimeError"
        print(f"runtime_error=\"{str(e).splitlines()[0][:160]}\"")
    reserved = torch.cuda.memory_reserved()
    allocated = sum(t.numel() for t in held)
    free1, total1 = torch.cuda.mem_get_info()
    print(f"error={err} tensors={len(held)} allocated={allocated} reserved={reserved} "
          f"after_free={free1} after_total={total1}")
    del held
    torch.cuda.empty_cache()
    again = []
    try:
        while len(again) < 4096:
            again.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except Exception:  # noqa: BLE001 - any failure ends the refill.
        pass
    print(f"refill_tensors={len(again)}")


def matmul(seconds):
    import torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    n = 0
    start = time.time()
    while time.time() - start < seconds:
        for _ in range(10):
            a @ b
        n += 10
        torch.cuda.synchronize()
    dt = time.time() - start
    print(f"matmul_iters_per_s={n / dt:.1f} tflops={n * 2 * 4096 ** 3 / dt / 1e12:.1f}")


def resnet(seconds, batch=8, start_at=0.0):
    import torch
    try:
        import torchvision
    except ImportError:
        print("resnet=SKIPPED reason=\"torchvision not installed\"")
        return
    model = torchvision.models.resnet50(weights=None).cuda().half().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
        late = time.time() - start_at if start_at > 0 else 0.0
        if start_at > 0 and late < 0:
            time.sleep(-late)
        n = 0
        start = time.time()
        while time.time() - start < seconds:
            model(x)
            n += batch
            if n % (10 * batch) == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    print(f"resnet50_batch={batch} resnet50_images_per_s={n / (time.time() - start):.1f} "
          f"late_s={max(late, 0.0):.1f}")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "mem":
        mem()
    elif mode == "matmul":
        matmul(float(sys.argv[2]))
    elif mode == "resnet":
        resnet(float(sys.argv[2]),
               int(sys.argv[3]) if len(sys.argv) > 3 else 8,
               float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
    else:
        print(__doc__)
        sys.exit(2)
