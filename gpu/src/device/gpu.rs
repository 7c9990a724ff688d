//! What the device does: buffers, uploads and read-backs, pipelines and dispatches
//! (the methods of [`Gpu`]).

use super::*;

/// Recycled buffers of at most this many words are cleared by uploads of zeros rather
/// than by a submission of their own.
const CLEAR_BY_UPLOAD: usize = 1 << 16;

impl Gpu {
    /// Opens the adapter that `EXACTGRAD_WGPU_ADAPTER` names, or the first in the order
    /// of [`adapters`].
    pub(crate) fn open() -> std::result::Result<Gpu, WgpuError> {
        let instance = instance();
        let list = ordered_adapters(&instance);
        if list.is_empty() {
            return Err(WgpuError::NoAdapter(
                "the Vulkan loader reports no device (install a driver, e.g. Mesa's lavapipe: \
                 `mesa-vulkan-drivers` and `libvulkan1` on Debian)"
                    .into(),
            ));
        }
        let index = match std::env::var(ADAPTER_ENV) {
            Ok(want) if !want.is_empty() => {
                let by_index = want.parse::<usize>().ok().filter(|&i| i < list.len());
                let by_name = || {
                    let w = want.to_lowercase();
                    list.iter()
                        .position(|a| a.get_info().name.to_lowercase().contains(&w))
                };
                by_index.or_else(by_name).ok_or_else(|| {
                    let names: Vec<String> = list
                        .iter()
                        .enumerate()
                        .map(|(i, a)| format!("{i}: {}", a.get_info().name))
                        .collect();
                    WgpuError::NoAdapter(format!(
                        "{ADAPTER_ENV}={want} matches none of the adapters [{}]",
                        names.join(", ")
                    ))
                })?
            }
            _ => 0,
        };
        let adapter = &list[index];
        let summary = summary(index, adapter);
        let cpu = adapter.get_info().device_type == wgpu::DeviceType::Cpu;
        let limits = adapter.limits();
        let mut features = wgpu::Features::empty();
        if summary.shader_f64 {
            features |= wgpu::Features::SHADER_F64;
        }
        let desc = wgpu::DeviceDescriptor {
            label: Some("exactgrad"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| WgpuError::Device(format!("{}: {e}", summary.name)))?;
        let lost = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&lost);
        device.set_device_lost_callback(move |_, _| flag.store(true, Ordering::SeqCst));
        // Errors are collected by the error scopes of each call; the default handler,
        // which panics, must never see one.
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| {
            log_uncaptured(&e);
        }));
        let max_binding = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        Ok(Gpu {
            device,
            queue,
            summary,
            cpu,
            max_binding,
            pool: BufferPool::new(max_binding),
            lost,
            fma_native: AtomicBool::new(false),
            soft_div_sqrt: AtomicBool::new(false),
            int_f64: AtomicBool::new(false),
            pipelines: Mutex::new(HashMap::new()),
            calls: Mutex::new(()),
        })
    }

    fn pipeline(&self, kernel: Kernel, exact: bool) -> Result<Arc<wgpu::ComputePipeline>> {
        let mut cache = self
            .pipelines
            .lock()
            .map_err(|_| device_error("a previous kernel panicked while compiling"))?;
        if let Some(p) = cache.get(&(kernel, exact)) {
            return Ok(Arc::clone(p));
        }
        let f64 = self.summary.shader_f64;
        let native = self.fma_native.load(Ordering::SeqCst);
        let soft = self.soft_div_sqrt.load(Ordering::SeqCst);
        let int_f64 = self.int_f64.load(Ordering::SeqCst) || !f64;
        // The fused multiply-add's emulation: in the device's f64, or in integers where
        // the sums use the integer binary64 (no exact f64, or asked for).
        let int_fma = kernel.needs_fma() && int_f64;
        let mut src = format!(
            "const EXACT: bool = {exact};\nconst WG: u32 = {WG}u;\nconst FMA_NATIVE: bool = {native};\nconst SOFT_DIV_SQRT: bool = {soft};\n"
        );
        if kernel == Kernel::Probe {
            let (f64_probe, fma_probe, wide) = if f64 {
                (
                    "f32(f64(x) + f64(y))",
                    "fma_emulated(x, y, z)",
                    "f32(f64(x) * f64(y) + f64(z))",
                )
            } else {
                ("0.0", "0.0", "0.0")
            };
            src.push_str(
                &Kernel::Probe
                    .source()
                    .replace("F64_PROBE", f64_probe)
                    .replace("FMA_PROBE", fma_probe)
                    .replace("F64_WIDE_PROBE", wide),
            );
        } else {
            src.push_str(kernel.source());
        }
        src.push_str(include_str!("../shaders/common.wgsl"));
        src.push_str(include_str!("../shaders/portable.wgsl"));
        let sums = kernel.needs_sums();
        if kernel == Kernel::Probe || kernel == Kernel::Portable || (sums && int_f64) || int_fma {
            src.push_str(include_str!("../shaders/f64_int.wgsl"));
        }
        if sums {
            src.push_str(if int_f64 {
                include_str!("../shaders/sums_int.wgsl")
            } else {
                include_str!("../shaders/sums_native.wgsl")
            });
        }
        if kernel.needs_pow() {
            src.push_str(include_str!("../shaders/pow.wgsl"));
        }
        if kernel.needs_transcendentals() {
            src.push_str(include_str!("../shaders/transcendental.wgsl"));
        }
        if kernel.needs_fma() {
            if f64 && (kernel == Kernel::Probe || !int_fma) {
                src.push_str(include_str!("../shaders/fma.wgsl"));
            } else {
                src.push_str(
                    "fn fma_rn(a: f32, b: f32, c: f32) -> f32 {\n    if FMA_NATIVE { return fma(a, b, c); }\n    return soft_fma(a, b, c);\n}\n",
                );
            }
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("exactgrad kernel"),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("exactgrad kernel"),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(device_error(format!(
                "compiling the {kernel:?} kernel: {e}"
            )));
        }
        let p = Arc::new(pipeline);
        cache.insert((kernel, exact), Arc::clone(&p));
        Ok(p)
    }

    /// The byte size of a buffer of `len` words (at least 16 bytes, so that empty
    /// buffers can be bound), or an error when it exceeds what one binding can hold.
    pub(crate) fn bytes(&self, len: usize) -> Result<u64> {
        // In checked arithmetic: `len` may come from a caller's sizes.
        let b = u64::try_from(len.max(4))
            .ok()
            .and_then(|l| l.checked_mul(4))
            .unwrap_or(u64::MAX);
        if b > self.max_binding || len > u32::MAX as usize {
            return Err(Error::Alloc {
                op: "wgpu",
                bytes: len.saturating_mul(4),
                reason: "larger than the device's largest storage buffer binding",
            });
        }
        Ok(b)
    }

    /// A buffer of at least `len` words for a tensor, from the pool or new; filled with
    /// `+0` when `zeroed` (wgpu zero-initialises a new buffer; a recycled one is cleared
    /// on the device), else holding stale words (an output a kernel overwrites). An
    /// [`Error::Alloc`] when the device refuses it.
    pub(crate) fn buffer(&self, len: usize, zeroed: bool) -> Result<Lease<'_>> {
        let _serial = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        self.check_lost()?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let lease = self.lease(len, Use::Storage);
        if let Ok(l) = &lease {
            if l.recycled && zeroed && len > 0 {
                self.clear(&l.buf, len);
            }
        }
        if pollster::block_on(oom.pop()).is_some() {
            return Err(Error::Alloc {
                op: "wgpu",
                bytes: len.saturating_mul(4),
                reason: "the device is out of memory",
            });
        }
        lease
    }

    /// Fills the first `len` words of `buf` with `+0`, ordered like an upload: up to
    /// [`CLEAR_BY_UPLOAD`] words as uploads of a static block of zeros (queued with the
    /// next submission, no submission of their own), beyond that one `clear_buffer`
    /// submission. Called with the `calls` lock held.
    fn clear(&self, buf: &wgpu::Buffer, len: usize) {
        static ZEROS: [u32; 4096] = [0; 4096];
        if len <= CLEAR_BY_UPLOAD {
            let mut at = 0;
            while at < len {
                let n = ZEROS.len().min(len - at);
                self.queue
                    .write_buffer(buf, (at as u64) * 4, words_as_bytes(&ZEROS[..n]));
                at += n;
            }
        } else {
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            encoder.clear_buffer(buf, 0, Some((len as u64) * 4));
            self.queue.submit([encoder.finish()]);
        }
    }

    /// Writes `words` into `buf` from word `start` (queued before the next submission,
    /// after every earlier one).
    pub(crate) fn write(&self, buf: &wgpu::Buffer, start: usize, words: &[u32]) -> Result<()> {
        if words.is_empty() {
            return Ok(());
        }
        let _serial = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        self.check_lost()?;
        self.queue
            .write_buffer(buf, (start as u64) * 4, words_as_bytes(words));
        Ok(())
    }

    fn check_lost(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(device_error("the device was lost"));
        }
        Ok(())
    }

    /// Reads words `start .. start + len` of `buf` back to the host, blocking until every
    /// kernel submitted before has finished.
    pub(crate) fn read(&self, buf: &wgpu::Buffer, start: usize, len: usize) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        out.try_reserve_exact(len).map_err(|_| Error::Alloc {
            op: "wgpu",
            bytes: len.saturating_mul(4),
            reason: "the allocator refused the request",
        })?;
        if len == 0 {
            return Ok(out);
        }
        let _serial = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        self.check_lost()?;
        let what = "reading back";
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let staging = self.lease(len, Use::Staging)?;
        let n_bytes = (len as u64) * 4;
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        encoder.copy_buffer_to_buffer(buf, (start as u64) * 4, &staging.buf, 0, n_bytes);
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = mpsc::channel();
        staging
            .buf
            .slice(0..n_bytes)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        // Any failure from here on leaves the staging buffer in an unknown state: it is
        // not given back to the pool.
        let fail = |staging: Lease<'_>, e: Error| {
            staging.discard();
            Err(e)
        };
        if let Some(e) = pollster::block_on(validation.pop()) {
            return fail(staging, device_error(format!("{what}: {e}")));
        }
        if let Some(e) = pollster::block_on(oom.pop()) {
            let e = Error::Alloc {
                op: "wgpu",
                bytes: len.saturating_mul(4),
                reason: match e {
                    wgpu::Error::OutOfMemory { .. } => "the device is out of memory",
                    _ => "the device refused the buffers",
                },
            };
            return fail(staging, e);
        }
        if let Err(e) = polled {
            return fail(
                staging,
                device_error(format!("{what}: waiting for the device: {e}")),
            );
        }
        match rx.try_recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return fail(staging, device_error(format!("{what}: {e}"))),
            Err(_) => {
                let e = device_error(format!(
                    "{what}: the device did not finish{}",
                    if self.lost.load(Ordering::SeqCst) {
                        " (the device was lost)"
                    } else {
                        ""
                    }
                ));
                return fail(staging, e);
            }
        }
        {
            let view = match staging.buf.slice(0..n_bytes).get_mapped_range() {
                Ok(v) => v,
                Err(e) => return fail(staging, device_error(format!("{what}: {e}"))),
            };
            let src: &[u8] = &view;
            out.extend(
                src.chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
        }
        staging.buf.unmap();
        Ok(out)
    }

    /// Runs `kernel` as the given dispatches, in order, on device buffers: `inputs`
    /// (bindings 1…), `scratch` words of device-only scratch (the next binding, when not
    /// 0) and the outputs `outs` (the last bindings, which the kernel may also read),
    /// each dispatch's own parameters at binding 0. An input or output that is a part of
    /// its buffer is bound through a temporary buffer (a copy on the device, copied back
    /// for an output), so the shaders always see whole buffers from index 0. Submits
    /// without waiting: [`Gpu::read`] waits.
    pub(crate) fn dispatch(
        &self,
        kernel: Kernel,
        exact: bool,
        dispatches: &[Dispatch],
        inputs: &[BufView<'_>],
        scratch: usize,
        outs: &[BufView<'_>],
    ) -> Result<()> {
        if outs.iter().all(|o| o.len == 0) || dispatches.iter().all(|d| d.threads == 0) {
            return Ok(());
        }
        let op = "wgpu";
        let mut groups = Vec::with_capacity(dispatches.len());
        for d in dispatches {
            let g = d.threads.div_ceil(WG as usize);
            let x = g.min(65_535);
            let y = g.div_ceil(x.max(1));
            if y > 65_535 {
                return Err(Error::Alloc {
                    op,
                    bytes: d.threads.saturating_mul(4),
                    reason: "more invocations than one dispatch can hold",
                });
            }
            groups.push((x as u32, y as u32));
        }
        // Checked before anything is created: every binding fits.
        for v in inputs.iter().chain(outs) {
            self.bytes(if v.is_whole() { v.cap } else { v.len })?;
        }
        self.bytes(scratch)?;
        // A call that panicked (it cannot: no code here panics) leaves nothing to repair.
        // Held while compiling too: the compiler's error scope is the device's as well.
        let _serial = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        self.check_lost()?;
        let pipeline = self.pipeline(kernel, exact)?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        // The buffer each binding sees: the view's own buffer when the view is all of it,
        // else a temporary copy of the view's words (temporaries, scratch and parameters
        // come from the pool and go back to it when this call returns; the queue orders
        // their next use after this submission).
        let mut temps: Vec<Lease<'_>> = Vec::new();
        let mut bound: Vec<(bool, usize)> = Vec::with_capacity(inputs.len() + 2);
        for v in inputs {
            if v.is_whole() {
                bound.push((false, 0));
            } else {
                let t = self.lease(v.len, Use::Storage)?;
                if v.len > 0 {
                    encoder.copy_buffer_to_buffer(
                        v.buf,
                        (v.start as u64) * 4,
                        &t.buf,
                        0,
                        (v.len as u64) * 4,
                    );
                }
                temps.push(t);
                bound.push((true, temps.len() - 1));
            }
        }
        let scratch_buf = if scratch > 0 {
            let sb = self.lease(scratch, Use::Storage)?;
            // Scratch starts as +0, as a new buffer does.
            if sb.recycled {
                encoder.clear_buffer(&sb.buf, 0, None);
            }
            Some(sb)
        } else {
            None
        };
        let mut out_temps: Vec<Option<Lease<'_>>> = Vec::with_capacity(outs.len());
        for o in outs {
            out_temps.push(if o.is_whole() {
                None
            } else {
                // The kernel may read its output (an update in place): the words go in too.
                let t = self.lease(o.len, Use::Storage)?;
                if o.len > 0 {
                    encoder.copy_buffer_to_buffer(
                        o.buf,
                        (o.start as u64) * 4,
                        &t.buf,
                        0,
                        (o.len as u64) * 4,
                    );
                }
                Some(t)
            });
        }
        let layout = pipeline.get_bind_group_layout(0);
        let mut binds = Vec::with_capacity(dispatches.len());
        let mut params_bufs = Vec::with_capacity(dispatches.len());
        for d in dispatches {
            let params = self.lease(d.params.len(), Use::Storage)?;
            // The whole buffer is written: words past the parameters read as 0, as in a
            // new buffer.
            let mut words = d.params.clone();
            words.resize((params.buf.size() / 4) as usize, 0);
            self.queue
                .write_buffer(&params.buf, 0, words_as_bytes(&words));
            params_bufs.push(params);
        }
        for params in &params_bufs {
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: params.buf.as_entire_binding(),
            }];
            for (i, (v, &(temp, t))) in inputs.iter().zip(&bound).enumerate() {
                let b = if temp { &temps[t].buf } else { v.buf };
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: b.as_entire_binding(),
                });
            }
            let mut next = inputs.len() as u32 + 1;
            if let Some(sb) = &scratch_buf {
                entries.push(wgpu::BindGroupEntry {
                    binding: next,
                    resource: sb.buf.as_entire_binding(),
                });
                next += 1;
            }
            for (o, t) in outs.iter().zip(&out_temps) {
                entries.push(wgpu::BindGroupEntry {
                    binding: next,
                    resource: t.as_ref().map_or(o.buf, |t| &t.buf).as_entire_binding(),
                });
                next += 1;
            }
            binds.push(self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            }));
        }
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&pipeline);
            for ((bind, &(x, y)), d) in binds.iter().zip(&groups).zip(dispatches) {
                if d.threads > 0 {
                    pass.set_bind_group(0, bind, &[]);
                    pass.dispatch_workgroups(x, y, 1);
                }
            }
        }
        for (o, t) in outs.iter().zip(&out_temps) {
            if let (Some(t), true) = (t, o.len > 0) {
                encoder.copy_buffer_to_buffer(
                    &t.buf,
                    0,
                    o.buf,
                    (o.start as u64) * 4,
                    (o.len as u64) * 4,
                );
            }
        }
        self.queue.submit([encoder.finish()]);
        if let Some(e) = pollster::block_on(validation.pop()) {
            return Err(device_error(format!("{kernel:?}: {e}")));
        }
        if let Some(e) = pollster::block_on(oom.pop()) {
            return Err(Error::Alloc {
                op,
                bytes: inputs.iter().chain(outs).map(|v| v.len).sum::<usize>() * 4,
                reason: match e {
                    wgpu::Error::OutOfMemory { .. } => "the device is out of memory",
                    _ => "the device refused the buffers",
                },
            });
        }
        Ok(())
    }

    /// [`Gpu::dispatch`] on host words: uploads `inputs`, runs, and reads the output back
    /// into `out`, blocking until the device is done (the probes).
    pub(crate) fn run(
        &self,
        kernel: Kernel,
        exact: bool,
        dispatches: &[Dispatch],
        inputs: &[Words<'_>],
        scratch: usize,
        out: &mut [u32],
    ) -> Result<()> {
        if out.is_empty() || dispatches.iter().all(|d| d.threads == 0) {
            return Ok(());
        }
        let mut bufs = Vec::with_capacity(inputs.len());
        for data in inputs {
            let b = self.buffer(data.len(), false)?;
            self.write(&b.buf, 0, data)?;
            bufs.push(b);
        }
        let views: Vec<BufView<'_>> = bufs
            .iter()
            .zip(inputs)
            .map(|(b, d)| BufView::whole(&b.buf, d.len()))
            .collect();
        let ob = self.buffer(out.len(), true)?;
        self.dispatch(
            kernel,
            exact,
            dispatches,
            &views,
            scratch,
            &[BufView::whole(&ob.buf, out.len())],
        )?;
        let words = self.read(&ob.buf, 0, out.len())?;
        out.copy_from_slice(&words);
        Ok(())
    }
}
