#!/usr/bin/env python3
"""An independent reader of the GPU's activity counters: NVML's GPM through pynvml, every 200 ms, apart
from swapctl and from nvidia-smi. Each row is a true average over its interval (two GPM samples), with
utilization.gpu (the duty cycle) read at the interval's end. Writes CSV to stdout until SIGTERM:
    python3 benchmarks/gpm_reader.py [--gpu 0] [--interval-ms 200] > gpm-200ms.csv
The columns are those of ../shared/fixtures/nvidia-smi/h200-1gpu/nvml-gpm-200ms-during-run.csv."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from datetime import UTC, datetime

import pynvml as nv

# nvmlGpmMetricId_t: graphics activity, SM activity, SM occupancy, any tensor, DRAM bandwidth, PCIe RX, TX
METRICS = (1, 2, 3, 5, 10, 21, 20)
COLUMNS = ("t_start_utc,t_end_utc,dt_s,gr_util,sm_util,sm_occ,tensor,dram_bw,pcie_rx_mibps,pcie_tx_mibps,"
           "util_gpu_snapshot")


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--interval-ms", type=float, default=200)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(args.gpu)
    supported = nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice
    print(f"# GPM supported: {supported}", flush=True)
    if not supported:
        return 3
    print(COLUMNS, flush=True)
    a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    nv.nvmlGpmSampleGet(handle, a)
    ta = time.time()
    step = args.interval_ms / 1000
    due = time.monotonic() + step
    try:
        while True:
            time.sleep(max(0.0, due - time.monotonic()))
            due += step
            nv.nvmlGpmSampleGet(handle, b)
            tb = time.time()
            util = nv.nvmlDeviceGetUtilizationRates(handle).gpu
            get = nv.c_nvmlGpmMetricsGet_t()
            get.version = nv.NVML_GPM_METRICS_GET_VERSION
            get.numMetrics = len(METRICS)
            get.sample1, get.sample2 = a, b
            for i, m in enumerate(METRICS):
                get.metrics[i].metricId = m
            nv.nvmlGpmMetricsGet(get)
            values = [get.metrics[i].value if get.metrics[i].nvmlReturn == 0 else float("nan")
                      for i in range(len(METRICS))]
            print(f"{iso(ta)},{iso(tb)},{tb - ta:.4f}," + ",".join(f"{v:.3f}" for v in values) + f",{util}",
                  flush=True)
            a, b, ta = b, a, tb
    finally:
        nv.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(main())
