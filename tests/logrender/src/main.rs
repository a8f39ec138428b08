//! A small engine that logs exactly as cuzk does, so swapctl's parser is tested on the real thing.
//!
//! The tracing macro calls (message, fields, their order and sigils, spans) are copied from
//! filecoin-project/curio @ e0294b0f (extern/cuzk/...); the subscriber is set up as cuzk-daemon's
//! main.rs does (`fmt().with_target(true)`, ANSI on unless NO_COLOR). TIMELINE lines go through
//! `eprintln!` with cuzk's format string, so they are written in pieces and other lines can land
//! inside them, as in the daemon; the C++ lines are one write each, as glibc's fprintf makes them.
//!
//! Work is real: synthesis threads, `workers` GPU workers per GPU sharing one mutex per GPU, real
//! sleeps for each phase. Every value logged is also written to the manifest (`manifest=PATH`): one
//! line `phase NAME VALUE` per value as swapctl should name it, and `gpu G held MS` per partition.
//!
//! Usage: cuzk-logrender [gpus=1] [workers=2] [synth=2] [jobs=2] [partitions=4] [synth_ms=30]
//!        [gpu_ms=12] [copy_ms=8] [pinned=0] [noise=0] [seed=1] [manifest=PATH]
use std::collections::HashMap;
use std::io::Write;
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};
use tracing::{info, info_span};

static TIMELINE_EPOCH: OnceLock<Instant> = OnceLock::new();
static MANIFEST: OnceLock<Mutex<Vec<String>>> = OnceLock::new();

// engine.rs:349-353, verbatim
fn timeline_event(event: &str, job_id: &str, detail: &str) {
    let epoch = TIMELINE_EPOCH.get().copied().unwrap_or_else(Instant::now);
    let offset_ms = epoch.elapsed().as_millis();
    eprintln!("TIMELINE,{},{},{},{}", offset_ms, event, job_id, detail);
}

/// A C++ `fprintf(stderr, ...)` line: glibc formats it into one buffer, one write(2) on fd 2, outside
/// Rust's stderr lock (so it can land between the pieces of an `eprintln!`).
fn cpp(line: String) {
    use std::os::fd::FromRawFd;
    let mut fd2 = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(2) });
    let _ = fd2.write_all(format!("{}\n", line).as_bytes());
}

fn record(name: &str, value: u128) {
    MANIFEST.get().unwrap().lock().unwrap().push(format!("phase {} {}", name, value));
}

fn note(line: String) {
    MANIFEST.get().unwrap().lock().unwrap().push(line);
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// ms around `base`, +-30%
    fn around(&mut self, base: u64) -> u64 {
        if base == 0 {
            return 0;
        }
        let spread = (base * 3 / 10).max(1);
        base - spread + self.next() % (2 * spread + 1)
    }
}

struct Cfg {
    gpus: usize,
    workers: usize,
    synth: usize,
    jobs: usize,
    partitions: usize,
    synth_ms: u64,
    gpu_ms: u64,
    copy_ms: u64,
    pinned: bool,
    noise: bool,
    seed: u64,
}


/// pipeline.rs: the events logged from there (target cuzk_core::pipeline)
mod pipeline {
    use super::{note, record};
    use super::engine::sleep;
    use std::time::Instant;
    use tracing::{info, info_span};

    pub fn synthesize_partition(job_id: &str, partition_idx: usize, plan_ms: u64, pinned: bool) -> u128 {
        // pipeline.rs:2383-2401
        let _span = info_span!(
            "synthesize_partition",
            job_id = job_id,
            partition = partition_idx,
        )
        .entered();
        let synth_start = Instant::now();
        sleep(plan_ms);
        let synthesis_duration = synth_start.elapsed();
        info!(
            partition = partition_idx,
            synth_ms = synthesis_duration.as_millis(),
            is_pinned = pinned,
            "partition synthesis complete"
        );
        record("synth_ms", synthesis_duration.as_millis());
        note(format!("pinned {}", pinned as u8));
        synthesis_duration.as_millis()
    }
}

/// engine.rs: the events logged from there (target cuzk_core::engine)
mod engine {
    use super::*;
pub struct Item {
    pub job_id: String,
    pub partition: usize,
    pub synth_ms: u128,
    pub plan: Vec<u64>, // copy, kernels, tail
}

pub struct Jobs {
    // job id -> (partitions left, start, synth total, gpu total)
    pub open: Mutex<HashMap<String, (usize, Instant, u128, u128)>>,
}

pub fn sleep(ms: u64) {
    thread::sleep(Duration::from_millis(ms));
}

pub fn ms(d: Duration) -> u128 {
    d.as_millis()
}

pub fn synth_worker(rx: Arc<Mutex<mpsc::Receiver<(String, usize, Vec<u64>)>>>, gpu_q: Arc<(Mutex<Vec<Item>>, Condvar)>, pinned: bool) {
    loop {
        let next = rx.lock().unwrap().recv();
        let Ok((job_id, p_idx, plan)) = next else { return };
        timeline_event("SYNTH_START", &job_id, &format!("partition={}", p_idx));
        let synth_ms = crate::pipeline::synthesize_partition(&job_id, p_idx, plan[0], pinned);
        // engine.rs:1752-1778
        timeline_event("SYNTH_END", &job_id, &format!("partition={},synth_ms={}", p_idx, synth_ms));
        let p_job_id = &job_id;
        tracing::info!(
            job_id = %p_job_id,
            partition = p_idx,
            synth_ms = synth_ms,
            "partition synthesis complete, pushing to GPU queue"
        );
        timeline_event("GPU_QUEUE", &job_id, &format!("partition={}", p_idx));
        let (q, cv) = &*gpu_q;
        q.lock().unwrap().push(Item { job_id: job_id.clone(), partition: p_idx, synth_ms, plan: plan[1..].to_vec() });
        cv.notify_one();
    }
}

/// groth16_cuda.cu's start function, as far as its timing lines go: one GPU per call (gpu_tid=0).
pub fn gpu_prove_start(mutex: &Mutex<()>, plan: &[u64], pinned: bool) -> (u128, u128) {
    let t_entry = Instant::now();
    sleep(1);
    let split = ms(t_entry.elapsed());
    cpp(format!("CUZK_TIMING: split_vectors_ms={} setup_to_split_ms={}", split, 0));
    record("split_vectors_ms", split);
    record("setup_to_split_ms", 0);
    cpp(format!("CUZK_TIMING: prep_msm_ms={}", 0));
    record("prep_msm_ms", 0);
    let t_before_lock = Instant::now();
    let pre_lock_ms = ms(t_before_lock - t_entry);
    let guard = mutex.lock().unwrap();
    let t_after_lock = Instant::now();
    let mutex_wait_ms = ms(t_after_lock - t_before_lock);
    cpp(format!("CUZK_TIMING: pre_lock_cpu_ms={} mutex_wait_ms={}", pre_lock_ms, mutex_wait_ms));
    record("pre_lock_cpu_ms", pre_lock_ms);
    record("mutex_wait_ms", mutex_wait_ms);
    // the a/b/c copy sits inside ntt_kernels from pageable memory, in coset_intt_sync from pinned
    let t_gpu_start = Instant::now();
    let (copy, kernels) = (plan[0], plan[1]);
    let t = Instant::now();
    if pinned { sleep(kernels) } else { sleep(copy + kernels) }
    let ntt = ms(t.elapsed());
    let t = Instant::now();
    if pinned { sleep(copy.saturating_sub(kernels)) }
    let sync = ms(t.elapsed());
    let t = Instant::now();
    sleep(kernels / 2);
    let msm = ms(t.elapsed());
    let total = ntt + sync + msm;
    cpp(format!(
        "CUZK_NTT_H: d_b_alloc={}ms ntt_kernels={}ms coset_intt_sync={}ms msm_init={}ms msm_invoke={}ms msm_dtor={}ms total={}ms",
        0, ntt, sync, 0, msm, 0, total
    ));
    for (k, v) in [("d_b_alloc", 0), ("ntt_kernels", ntt), ("coset_intt_sync", sync), ("msm_init", 0),
                   ("msm_invoke", msm), ("msm_dtor", 0), ("ntt_h_total", total)] {
        record(k, v);
    }
    let ntt_h_ms = ms(t_gpu_start.elapsed());
    cpp(format!("CUZK_TIMING: gpu_tid={} ntt_msm_h_ms={}", 0, ntt_h_ms));
    record("ntt_msm_h_ms", ntt_h_ms);
    cpp(format!("CUZK_TIMING: gpu_tid={} barrier_wait_ms={}", 0, 0));
    record("barrier_wait_ms", 0);
    let t = Instant::now();
    sleep(1);
    let batch_add = ms(t.elapsed());
    cpp(format!("CUZK_TIMING: gpu_tid={} batch_add_ms={}", 0, batch_add));
    record("batch_add_ms", batch_add);
    let t = Instant::now();
    sleep(1);
    let tail = ms(t.elapsed());
    let gpu_total = ms(t_gpu_start.elapsed());
    cpp(format!("CUZK_TIMING: gpu_tid={} tail_msm_ms={} gpu_total_ms={}", 0, tail, gpu_total));
    record("tail_msm_ms", tail);
    record("gpu_total_ms", gpu_total);
    let t_before_unlock = Instant::now();
    let mutex_held_ms = ms(t_before_unlock - t_after_lock);
    let total_fn_ms = ms(t_before_unlock - t_entry);
    cpp(format!("CUZK_TIMING: mutex_held_ms={} total_start_fn_ms={}", mutex_held_ms, total_fn_ms));
    record("mutex_held_ms", mutex_held_ms);
    record("total_start_fn_ms", total_fn_ms);
    drop(guard);
    (mutex_held_ms, total_fn_ms)
}

/// The engine's start as cuzk logs it (engine.rs:1244-1247), then each GPU worker's first line: the
/// two-stage pipeline's (engine.rs:2958, `pipeline.enabled`, the default) or the monolithic one's (:3378).
pub fn start_lines(pipeline_enabled: bool, gpus: u32, workers: u32) {
    info!(pipeline_enabled = pipeline_enabled, "starting cuzk engine");
    let mut worker_id = 0u32;
    for gpu_ordinal in 0..gpus {
        if pipeline_enabled {
            for worker_sub_id in 0..workers {
                info!(worker_id = worker_id, gpu = gpu_ordinal, sub_id = worker_sub_id, "pipeline GPU worker started");
                worker_id += 1;
            }
        } else {
            info!(worker_id = worker_id, gpu = gpu_ordinal, "monolithic GPU worker started");
            worker_id += 1;
        }
    }
}

pub fn gpu_worker(worker_id: u32, gpu_ordinal: u32, mutex: Arc<Mutex<()>>, gpu_q: Arc<(Mutex<Vec<Item>>, Condvar)>,
              jobs: Arc<Jobs>, pinned: bool, done: mpsc::Sender<()>) {
    loop {
        let item = {
            let (q, cv) = &*gpu_q;
            let mut q = q.lock().unwrap();
            loop {
                if let Some(i) = q.pop() { break i }
                q = cv.wait(q).unwrap();
            }
        };
        if item.partition == usize::MAX {
            return;
        }
        let job_id = item.job_id.clone();
        let partition_index = Some(item.partition);
        let proof_kind = "porep-c2";
        // engine.rs:3005-3012
        let span = info_span!("gpu_worker",
            worker_id = worker_id,
            gpu = gpu_ordinal,
            job_id = %job_id,
            proof_kind = %proof_kind,
            batch_size = 1,
            partition = ?partition_index,
        );
        let _e = span.enter();
        let hot_path_start = Instant::now();
        timeline_event("GPU_PICKUP", &job_id, &format!("worker={},partition={}", worker_id, item.partition));
        let t_status = hot_path_start.elapsed();
        let t_mark_busy = hot_path_start.elapsed();
        info!(
            worker_id = worker_id,
            partition = ?partition_index,
            status_ms = t_status.as_millis(),
            fail_check_ms = 0u128,
            mark_busy_ms = (t_mark_busy - t_status).as_millis(),
            total_overhead_ms = t_mark_busy.as_millis(),
            "GPU_TIMING hot_path pre-prove overhead"
        );
        for k in ["status_ms", "fail_check_ms", "mark_busy_ms", "total_overhead_ms"] {
            record(k, if k == "total_overhead_ms" { t_mark_busy.as_millis() } else if k == "mark_busy_ms" { (t_mark_busy - t_status).as_millis() } else if k == "status_ms" { t_status.as_millis() } else { 0 });
        }
        timeline_event("GPU_START", &job_id, &format!("worker={},partition={}", worker_id, item.partition));
        let spawn_t = Instant::now();
        // spawn_blocking: another thread, outside the span (engine.rs:3126-3146)
        let (m, plan) = (mutex.clone(), item.plan.clone());
        let (held, _fn_ms) = thread::spawn(move || {
            let enter_t = Instant::now();
            let r = gpu_prove_start(&m, &plan, pinned);
            let prove_done_t = Instant::now();
            info!(
                worker_id = worker_id,
                partition = ?partition_index,
                spawn_to_enter_ms = (enter_t - spawn_t).as_millis(),
                prove_start_ms = (prove_done_t - enter_t).as_millis(),
                "GPU_TIMING spawn_blocking prove_start"
            );
            record("spawn_to_enter_ms", (enter_t - spawn_t).as_millis());
            record("prove_start_ms", (prove_done_t - enter_t).as_millis());
            r
        }).join().unwrap();
        info!(
            worker_id = worker_id,
            partition = ?partition_index,
            total_pre_prove_ms = hot_path_start.elapsed().as_millis(),
            spawn_blocking_wall_ms = spawn_t.elapsed().as_millis(),
            "GPU_TIMING prove_start returned"
        );
        record("total_pre_prove_ms", hot_path_start.elapsed().as_millis());
        record("spawn_blocking_wall_ms", spawn_t.elapsed().as_millis());
        note(format!("gpu {} held {}", gpu_ordinal, held));
        drop(_e);
        // the finalizer: its own task, no span (engine.rs:3160-3253)
        let (jobs, done, tail, synth_ms) = (jobs.clone(), done.clone(), item.plan[2], item.synth_ms);
        let p_idx = item.partition;
        thread::spawn(move || {
            let fin_start = Instant::now();
            let t = Instant::now();
            sleep(tail);
            let bg2 = ms(t.elapsed());
            cpp(format!("CUZK_TIMING: b_g2_msm_ms={} num_circuits={}", bg2, 1));
            record("b_g2_msm_ms", bg2);
            let gpu_duration = spawn_t.elapsed();
            timeline_event("GPU_END", &job_id, &format!("worker={},partition={},gpu_ms={}", worker_id, p_idx, gpu_duration.as_millis()));
            let t_finish = fin_start.elapsed();
            let parent_id = &job_id;
            let t_lock = fin_start.elapsed();
            let filled;
            let finished;
            {
                let mut open = jobs.open.lock().unwrap();
                let e = open.get_mut(&job_id).unwrap();
                e.0 -= 1;
                e.2 += synth_ms;
                e.3 += gpu_duration.as_millis();
                filled = (e.0 == 0) as u8;
                finished = if e.0 == 0 { Some((e.1.elapsed(), e.2, e.3)) } else { None };
            }
            // engine.rs:474-490
            info!(
                job_id = %parent_id,
                partition = p_idx,
                gpu_ms = gpu_duration.as_millis(),
                filled = filled,
                "partition GPU prove complete"
            );
            record("gpu_ms", gpu_duration.as_millis());
            let trim_t = Instant::now();
            info!(
                job_id = %parent_id,
                partition = p_idx,
                malloc_trim_ms = trim_t.elapsed().as_millis(),
                "FIN_TIMING malloc_trim (success path)"
            );
            record("malloc_trim_ms", trim_t.elapsed().as_millis());
            if let Some((total, synth, gpu)) = finished {
                // engine.rs:506-512
                info!(
                    job_id = %parent_id,
                    proof_len = 1920usize,
                    total_ms = total.as_millis(),
                    synth_ms = synth,
                    gpu_ms = gpu,
                    "Phase 7: all partitions complete, proof assembled"
                );
                record("job_total_ms", total.as_millis());
                record("job_synth_ms", synth);
                record("job_gpu_ms", gpu);
                note("job".to_string());
            }
            let t_result = fin_start.elapsed();
            info!(
                worker_id = worker_id,
                partition = ?Some(p_idx),
                finish_ms = t_finish.as_millis(),
                drop_res_ms = 0u128,
                lock_wait_ms = (t_lock - t_finish).as_millis(),
                process_ms = (t_result - t_lock).as_millis(),
                total_ms = t_result.as_millis(),
                "FIN_TIMING finalizer partition"
            );
            record("finalizer_finish_ms", t_finish.as_millis());
            record("finalizer_drop_res_ms", 0);
            record("finalizer_lock_wait_ms", (t_lock - t_finish).as_millis());
            record("finalizer_process_ms", (t_result - t_lock).as_millis());
            record("finalizer_total_ms", t_result.as_millis());
            let _ = done.send(());
        });
    }
}

}

use engine::{gpu_worker, synth_worker, Item, Jobs};

fn main() {
    let mut kv: HashMap<String, String> = HashMap::new();
    for a in std::env::args().skip(1) {
        if let Some((k, v)) = a.split_once('=') {
            kv.insert(k.to_string(), v.to_string());
        }
    }
    let num = |k: &str, d: u64| kv.get(k).map(|v| v.parse().unwrap()).unwrap_or(d);
    let cfg = Cfg {
        gpus: num("gpus", 1) as usize, workers: num("workers", 2) as usize, synth: num("synth", 2) as usize,
        jobs: num("jobs", 2) as usize, partitions: num("partitions", 4) as usize, synth_ms: num("synth_ms", 30),
        gpu_ms: num("gpu_ms", 12), copy_ms: num("copy_ms", 8), pinned: num("pinned", 0) == 1,
        noise: num("noise", 0) > 0, seed: num("seed", 1),
    };
    MANIFEST.set(Mutex::new(Vec::new())).unwrap();
    // cuzk-daemon/src/main.rs:55-61 (the level filter is RUST_LOG's default, info); NO_COLOR as 0.3.22 does it
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(std::env::var_os("NO_COLOR").map_or(true, |v| v.is_empty()))
        .with_target(true)
        .init();
    let addr = "0.0.0.0:9820";
    info!(target: "cuzk_daemon", "cuzk-daemon starting");
    info!(target: "cuzk_daemon", listen = %addr, "configuration loaded");
    TIMELINE_EPOCH.get_or_init(Instant::now);
    if let Some(shape) = kv.get("starts") {
        // only the start (starts=pipeline|monolithic): engine.start() before the ready line (main.rs:119, :231)
        engine::start_lines(shape == "pipeline", cfg.gpus as u32, cfg.workers as u32);
        info!(target: "cuzk_daemon", "cuzk-daemon ready, serving on {}", addr);
        return;
    }
    info!(target: "cuzk_daemon", "cuzk-daemon ready, serving on {}", addr);

    let (tx, rx) = mpsc::channel();
    let rx = Arc::new(Mutex::new(rx));
    let gpu_q = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
    let jobs = Arc::new(Jobs { open: Mutex::new(HashMap::new()) });
    let (done_tx, done_rx) = mpsc::channel();
    let synths: Vec<_> = (0..cfg.synth).map(|_| {
        let (rx, q) = (rx.clone(), gpu_q.clone());
        let pinned = cfg.pinned;
        thread::spawn(move || synth_worker(rx, q, pinned))
    }).collect();
    let mut workers = Vec::new();
    for g in 0..cfg.gpus {
        let mutex = Arc::new(Mutex::new(()));
        for w in 0..cfg.workers {
            let (m, q, j, d) = (mutex.clone(), gpu_q.clone(), jobs.clone(), done_tx.clone());
            let worker_id = (g * cfg.workers + w) as u32;
            let pinned = cfg.pinned;
            workers.push(thread::spawn(move || gpu_worker(worker_id, g as u32, m, q, j, pinned, d)));
        }
    }
    let stop_noise = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise_us = num("noise", 0);
    let noise = if cfg.noise {
        // C++ lines from another thread, often: they land inside TIMELINE lines' pieces
        let stop = stop_noise.clone();
        Some(thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                cpp(format!("CUZK_TIMING: async_dealloc_ms={}", 0));
                n += 1;
                thread::sleep(Duration::from_micros(noise_us));
            }
            note(format!("phase_count async_dealloc_ms {}", n));
        }))
    } else {
        None
    };
    let mut rng = Rng(cfg.seed);
    for j in 0..cfg.jobs {
        let job_id = format!("{:08x}-{:04x}", 0x5b1e90c2u64 + (cfg.seed * 131 + j as u64) * 7919, j);
        jobs.open.lock().unwrap().insert(job_id.clone(), (cfg.partitions, Instant::now(), 0, 0));
        for p in 0..cfg.partitions {
            let plan = vec![rng.around(cfg.synth_ms), rng.around(cfg.copy_ms), rng.around(cfg.gpu_ms), rng.around(cfg.gpu_ms / 3)];
            tx.send((job_id.clone(), p, plan)).unwrap();
        }
    }
    drop(tx);
    for _ in 0..cfg.jobs * cfg.partitions {
        done_rx.recv().unwrap();
    }
    stop_noise.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(n) = noise { n.join().unwrap(); }
    for s in synths { s.join().unwrap(); }
    {
        let (q, cv) = &*gpu_q;
        let mut q = q.lock().unwrap();
        for _ in 0..workers.len() {
            q.push(Item { job_id: String::new(), partition: usize::MAX, synth_ms: 0, plan: vec![] });
        }
        cv.notify_all();
    }
    for w in workers { w.join().unwrap(); }
    if let Some(path) = kv.get("manifest") {
        let lines = MANIFEST.get().unwrap().lock().unwrap().join("\n");
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(f, "run {}", cfg.gpus).unwrap();
        writeln!(f, "{}", lines).unwrap();
    }
}
