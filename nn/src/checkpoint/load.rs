//! Moving a module's parameters and buffers in and out of a [`TensorFile`], by their
//! names. The functions take the walk over a module's entries (its `visit_entries`)
//! rather than the module, so that the module traits can call them.

use super::tensor_file::TensorFile;
use crate::entry::Entry;
use crate::error::{Error, Result, StateDictMismatch};
use exactgrad_autograd::{no_grad, Tensor};
use exactgrad_core::Backend;

/// A walk over a module's entries: calls its argument with each entry's full name.
pub(crate) type Walk<'w, B> = &'w dyn Fn(&mut dyn FnMut(&str, Entry<'_, B>));

/// How [`load_state_dict_with`](super::load_state_dict_with) treats entries that do not match the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Refuse the file when an entry of the module is missing or the file holds an
    /// entry under the prefix that the module does not have (PyTorch's `strict=True`,
    /// the default). Without it, both are only reported in the [`LoadReport`].
    pub strict: bool,
    /// Accept NaN and ±∞ in the loaded values. By default a non-finite value is an error
    /// naming the entry (a checkpoint of a diverged run is refused, not trained on).
    pub allow_non_finite: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            strict: true,
            allow_non_finite: false,
        }
    }
}

impl LoadOptions {
    /// The defaults with `strict` (PyTorch's `load_state_dict(…, strict)`).
    pub fn strict(strict: bool) -> Self {
        Self {
            strict,
            ..Self::default()
        }
    }
}

/// What [`load_state_dict_with`](super::load_state_dict_with) did not load (both lists are empty after a strict load).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Entries of the module that the file lacks (their values are unchanged).
    pub missing: Vec<String>,
    /// Entries of the file, under the prefix, that the module does not have.
    pub unexpected: Vec<String>,
}

/// The state dict of the module whose entries `walk` visits (see
/// [`ModuleExt::state_dict`](crate::ModuleExt::state_dict)).
pub(crate) fn state_dict_of<B: Backend>(walk: Walk<'_, B>) -> Result<TensorFile> {
    check_unique_names(walk)?;
    let mut out = TensorFile::default();
    let mut result = Ok(());
    let mut add = |name: &str, t: &Tensor<B>| {
        if result.is_ok() {
            result = out.insert_tensor(name, t);
        }
    };
    let mut ints = Vec::new();
    walk(&mut |name, e| match e {
        Entry::Parameter(t) | Entry::Buffer(t) => add(name, t),
        Entry::IntBuffer(b) => ints.push((name.to_string(), b.get())),
        Entry::Stream(_) | Entry::Training(_) => {}
    });
    result?;
    for (name, v) in ints {
        out.insert_ints(&name, &[], vec![v])?;
    }
    Ok(out)
}

/// Fails, naming them, when two entries with state (parameters, buffers and integer
/// buffers among themselves, random streams among themselves) have one name: a state
/// dict would hold one of them and a load would copy one value into both. A derived module's own fields cannot collide (the derive refuses
/// them), but nested names can (a child `a` with a parameter `b` and a field renamed
/// `a.b`), and so can a hand-written `visit`.
pub(crate) fn check_unique_names<B: Backend>(walk: Walk<'_, B>) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    let mut repeated = std::collections::BTreeSet::new();
    walk(&mut |name, e| {
        // Tensors and streams are saved under names of their own (`model.*` and
        // `stream.*` in a training checkpoint).
        let space = match e {
            Entry::Parameter(_) | Entry::Buffer(_) | Entry::IntBuffer(_) => "",
            Entry::Stream(_) => "stream ",
            Entry::Training(_) => return,
        };
        if !seen.insert((space, name.to_string())) {
            repeated.insert(format!("{space}{name}"));
        }
    });
    if repeated.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(
            "state_dict",
            "module",
            format!("two or more entries of the module are named {repeated:?}"),
        ))
    }
}

/// [`load_state_dict_with`](super::load_state_dict_with) on the module whose entries
/// `walk` visits.
pub(crate) fn load_entries<B: Backend>(
    walk: Walk<'_, B>,
    file: &TensorFile,
    prefix: &str,
    options: LoadOptions,
) -> Result<LoadReport> {
    prepare_entries(walk, file, prefix, options)?.commit(walk)
}

/// The values a load will copy into a module, read and checked: committing them changes
/// the module; dropping them changes nothing.
pub(crate) struct Prepared<'f, B: Backend> {
    /// Each parameter and float buffer with its new values.
    values: Vec<(Tensor<B>, &'f [f32])>,
    /// The new value of each integer buffer, in visiting order (`None`: keep it).
    ints: Vec<Option<i64>>,
    report: LoadReport,
}

impl<B: Backend> Prepared<'_, B> {
    /// Copies the values into the module whose entries `walk` visits (the one they were
    /// prepared for). Fails only when a tensor cannot be allocated.
    pub(crate) fn commit(self, walk: Walk<'_, B>) -> Result<LoadReport> {
        let _guard = no_grad();
        for (t, v) in self.values {
            t.copy_(&Tensor::from_slice(t.backend(), v, t.dims())?)?;
        }
        // The integer buffers, in the same visiting order (a missing optional one keeps
        // its value).
        let mut i = 0;
        walk(&mut |_, e| {
            let Entry::IntBuffer(b) = e else { return };
            if let Some(Some(v)) = self.ints.get(i) {
                b.set(*v);
            }
            i += 1;
        });
        Ok(self.report)
    }
}

/// Reads and checks everything a load of `file` into the module whose entries `walk`
/// visits needs, changing nothing (see [`load_entries`]).
pub(crate) fn prepare_entries<'f, B: Backend>(
    walk: Walk<'_, B>,
    file: &'f TensorFile,
    prefix: &str,
    options: LoadOptions,
) -> Result<Prepared<'f, B>> {
    check_unique_names(walk)?;
    // The parameters, then the float buffers, each in visiting order (`named_parameters`
    // followed by `named_buffers`).
    let mut entries = Vec::new();
    let mut buffers = Vec::new();
    walk(&mut |name, e| match e {
        Entry::Parameter(t) => entries.push((name.to_string(), t.clone())),
        Entry::Buffer(t) => buffers.push((name.to_string(), t.clone())),
        _ => {}
    });
    entries.extend(buffers);
    let mut problems = StateDictMismatch::default();
    let mut report = LoadReport::default();
    let mut values = Vec::with_capacity(entries.len());
    let mut known = std::collections::BTreeSet::new();
    for (name, t) in &entries {
        let key = format!("{prefix}{name}");
        known.insert(key.clone());
        match file.floats(&key) {
            Ok((shape, v)) => {
                if shape != t.dims() {
                    problems
                        .wrong_shape
                        .push((key, shape.to_vec(), t.dims().to_vec()));
                } else if let (false, Some(i)) = (
                    options.allow_non_finite,
                    v.iter().position(|x| !x.is_finite()),
                ) {
                    problems.non_finite.push((key, i));
                } else {
                    values.push((t, v));
                }
            }
            Err(_) => match file.dtype(&key) {
                Some(d) => problems.wrong_dtype.push((key, d, "floating-point")),
                None => report.missing.push(key),
            },
        }
    }
    let mut int_values = Vec::new();
    walk(&mut |name, e| {
        let Entry::IntBuffer(b) = e else { return };
        let key = format!("{prefix}{name}");
        known.insert(key.clone());
        match file.ints(&key) {
            Ok((shape, v)) => {
                if shape.is_empty() && v.len() == 1 {
                    int_values.push(Some(v[0]));
                } else {
                    problems.wrong_shape.push((key, shape.to_vec(), Vec::new()));
                }
            }
            Err(_) => {
                int_values.push(None);
                match file.dtype(&key) {
                    Some(d) => problems.wrong_dtype.push((key, d, "integer")),
                    None if b.is_optional() => {}
                    None => report.missing.push(key),
                }
            }
        }
    });
    report.unexpected = file
        .names()
        .into_iter()
        .filter(|n| n.starts_with(prefix) && !known.contains(*n))
        .map(str::to_string)
        .collect();
    if options.strict {
        problems.missing = std::mem::take(&mut report.missing);
        problems.unexpected = std::mem::take(&mut report.unexpected);
    }
    if !problems.is_empty() {
        return Err(Error::StateDict(Box::new(problems)));
    }
    Ok(Prepared {
        values: values.into_iter().map(|(t, v)| (t.clone(), v)).collect(),
        ints: int_values,
        report,
    })
}
