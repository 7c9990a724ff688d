//! `#[derive(Module)]` for `exactgrad-nn`: a struct's fields name its parameters,
//! buffers, random streams, training flag and child modules once, and its inherent
//! `forward` is the module's function.
//!
//! Use it through `exactgrad::nn::Module` (or `exactgrad_nn::Module`), which is both the
//! trait and this derive; the documentation with examples is at the trait and in
//! `docs/api.md` ("`#[derive(Module)]`"). In short:
//!
//! | field | becomes |
//! |---|---|
//! | any other type (default) | a child module, `v.child("name", &self.name)` |
//! | `#[module(param)]` on `Tensor<B>`, `Option<Tensor<B>>`, `Vec<Tensor<B>>` | parameter(s) |
//! | `#[module(buffer)]` on the same | float buffer(s) |
//! | `RandomStream`, `TrainingFlag`, `IntBuffer` (by type, or `#[module(stream)]`, `#[module(training)]`, `#[module(int_buffer)]`) | a random stream, the training flag, an integer buffer |
//! | `bool`, `char`, numbers, `PhantomData` and arrays, tuples, `Option`s and `Vec`s of them | nothing (skipped) |
//! | `#[module(skip)]` | nothing (configs and other plain data) |
//!
//! `Option<X>` names `X` when it is `Some`; `Vec<X>` and `[X; N]` name `name.0`,
//! `name.1`, … (PyTorch's `ModuleList` and `ParameterList` keys). `#[module(rename =
//! "key")]` sets the key; tuple structs' keys are `0`, `1`, ….
//!
//! On the struct: `#[module(forward = "method")]` delegates `forward` to another inherent
//! method; `#[module(backend = "Type")]` names the backend when the struct has no type
//! parameter bounded by `Backend`; `#[module(crate = "path")]` names the crate that
//! exports `Module` when it is neither `::exactgrad::nn` nor (inside the package
//! `exactgrad-nn`) `::exactgrad_nn`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{
    parse_macro_input, parse_quote, Data, DeriveInput, Fields, GenericArgument, Ident, LitStr,
    Path, PathArguments, Type, TypeParamBound, WherePredicate,
};

/// Derives `Module<B>`: `visit` from the fields in declaration order, `forward` from the
/// type's inherent `forward` (see the crate documentation).
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What a field is to the module.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Child,
    Param,
    Buffer,
    IntBuffer,
    Stream,
    Training,
    Skip,
}

impl Kind {
    fn attr_name(self) -> &'static str {
        match self {
            Kind::Child => "child",
            Kind::Param => "param",
            Kind::Buffer => "buffer",
            Kind::IntBuffer => "int_buffer",
            Kind::Stream => "stream",
            Kind::Training => "training",
            Kind::Skip => "skip",
        }
    }
}

/// The struct-level options.
struct StructOptions {
    forward: Option<Ident>,
    backend: Option<Type>,
    krate: Option<Path>,
}

/// One field, classified.
struct Field {
    /// `self.<member>`.
    member: syn::Member,
    ty: Type,
    kind: Kind,
    /// The state-dict key (`None` for the training flag, which has no key).
    key: String,
    span: Span,
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let data = match &input.data {
        Data::Struct(s) => s,
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span,
                "#[derive(Module)] supports structs only: a module is a struct of its parameters, buffers and children (write `impl Module<B>` by hand for an enum)",
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "#[derive(Module)] supports structs only, not unions",
            ))
        }
    };
    let options = struct_options(input)?;
    let fields = classify_fields(&data.fields)?;
    check_keys(&fields)?;

    let krate = match &options.krate {
        Some(p) => quote!(#p),
        None => default_crate(),
    };
    let private = quote!(#krate::__private);

    // The backend: a named type, the one type parameter bounded by `Backend`, or a new
    // parameter (a module that holds nothing backend-specific, e.g. a stateless one).
    let mut generics = input.generics.clone();
    let backend: Type = match &options.backend {
        Some(t) => t.clone(),
        None => match backend_param(&input.generics)? {
            Some(ident) => parse_quote!(#ident),
            None => {
                let ident = Ident::new("__ExactgradBackend", Span::call_site());
                generics
                    .params
                    .insert(0, parse_quote!(#ident: #private::Backend));
                parse_quote!(#ident)
            }
        },
    };
    let backend_ident = match &backend {
        Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            Some(p.path.segments[0].ident.clone())
        }
        _ => None,
    };

    // A child whose type involves a type parameter other than the backend must be a
    // module over the backend: say so in the impl's where-clause (as serde's derives
    // bound the parameters their fields use).
    let type_params: Vec<Ident> = input
        .generics
        .type_params()
        .map(|p| p.ident.clone())
        .filter(|i| Some(i) != backend_ident.as_ref())
        .collect();
    {
        let where_clause = generics.make_where_clause();
        for f in fields.iter().filter(|f| f.kind == Kind::Child) {
            let leaf = leaf_type(&f.ty);
            if mentions_any(leaf, &type_params) {
                where_clause
                    .predicates
                    .push(parse_quote!(#leaf: #krate::Module<#backend>));
            }
        }
    }
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, ty_generics, _) = input.generics.split_for_impl();
    let name = &input.ident;

    let visitor = Ident::new("__visitor", Span::call_site());
    let visits: Vec<TokenStream2> = fields
        .iter()
        .map(|f| {
            let member = &f.member;
            visit_field(
                f,
                &f.ty,
                quote_spanned!(f.span=> &self.#member),
                {
                    let key = &f.key;
                    quote!(#key)
                },
                &visitor,
                &private,
                0,
            )
        })
        .collect();

    let describer = Ident::new("__describe", Span::call_site());
    let describes: Vec<TokenStream2> = fields
        .iter()
        .filter(|f| f.kind == Kind::Child)
        .map(|f| {
            let member = &f.member;
            let key = &f.key;
            describe_field(
                f,
                &f.ty,
                quote_spanned!(f.span=> &self.#member),
                quote!(#key),
                &describer,
                &backend,
                &private,
                0,
            )
        })
        .collect();
    let type_name = LitStr::new(&name.to_string(), name.span());

    let input_ident = Ident::new("__input", Span::call_site());
    let call = match &options.forward {
        // Another name than `forward` cannot reach the trait's `forward`.
        Some(method) => quote_spanned!(method.span()=> Self::#method(self, #input_ident)),
        // `self.forward(…)` finds an inherent `forward` first. Without one, the trait's
        // `forward` (this very method) and the fallback below are both candidates at the
        // same step of method resolution, which is an ambiguity error (E0034) — never
        // a recursive call.
        None => {
            let call = quote_spanned!(name.span()=> self.forward(#input_ident));
            quote! {{
                #[allow(unused_imports)]
                use #private::DeriveModuleNeedsAnInherentForward as _;
                #call
            }}
        }
    };

    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Module<#backend> for #name #ty_generics #where_clause {
            fn forward(
                &self,
                #input_ident: &#private::Tensor<#backend>,
            ) -> #krate::Result<#private::Tensor<#backend>> {
                // The records of a trace made in `forward` belong to this module's path.
                let _scope = #private::module_scope::<#backend>(self);
                #private::forward_output::<#backend, _>(#call)
            }

            #[allow(unused_variables)]
            fn visit(&self, #visitor: &mut #krate::Visitor<'_, #backend>) {
                #(#visits)*
            }

            fn describe(&self) -> #private::String {
                #[allow(unused_mut)]
                let mut #describer = #private::Describe::new(#type_name);
                #(#describes)*
                #describer.finish()
            }
        }
    })
}

/// `::exactgrad_nn` inside the package `exactgrad-nn` (its library, which declares
/// `extern crate self as exactgrad_nn`, and its tests, examples and doctests, which
/// depend on it), `::exactgrad::nn` everywhere else: a user depends on the facade.
fn default_crate() -> TokenStream2 {
    match std::env::var("CARGO_PKG_NAME").as_deref() {
        Ok("exactgrad-nn") => quote!(::exactgrad_nn),
        _ => quote!(::exactgrad::nn),
    }
}

fn struct_options(input: &DeriveInput) -> syn::Result<StructOptions> {
    let mut o = StructOptions {
        forward: None,
        backend: None,
        krate: None,
    };
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("forward") {
                let s: LitStr = meta.value()?.parse()?;
                o.forward = Some(s.parse()?);
            } else if meta.path.is_ident("backend") {
                let s: LitStr = meta.value()?.parse()?;
                o.backend = Some(s.parse()?);
            } else if meta.path.is_ident("crate") {
                let s: LitStr = meta.value()?.parse()?;
                o.krate = Some(s.parse_with(Path::parse_mod_style)?);
            } else {
                return Err(meta.error(
                    "unknown #[module] option on a struct: expected `forward = \"method\"`, `backend = \"Type\"` or `crate = \"path\"`",
                ));
            }
            Ok(())
        })?;
    }
    Ok(o)
}

fn classify_fields(fields: &Fields) -> syn::Result<Vec<Field>> {
    let mut out = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let mut kind: Option<Kind> = None;
        let mut rename: Option<String> = None;
        for attr in f.attrs.iter().filter(|a| a.path().is_ident("module")) {
            attr.parse_nested_meta(|meta| {
                let set = |k: Kind, kind: &mut Option<Kind>| -> syn::Result<()> {
                    if let Some(old) = kind {
                        return Err(meta.error(format!(
                            "a field is one thing: #[module({})] and #[module({})] both given",
                            old.attr_name(),
                            k.attr_name()
                        )));
                    }
                    *kind = Some(k);
                    Ok(())
                };
                if meta.path.is_ident("rename") {
                    let s: LitStr = meta.value()?.parse()?;
                    rename = Some(s.value());
                    return Ok(());
                }
                let k = [
                    Kind::Child,
                    Kind::Param,
                    Kind::Buffer,
                    Kind::IntBuffer,
                    Kind::Stream,
                    Kind::Training,
                    Kind::Skip,
                ]
                .into_iter()
                .find(|k| meta.path.is_ident(k.attr_name()));
                match k {
                    Some(k) => set(k, &mut kind),
                    None => Err(meta.error(
                        "unknown #[module] option on a field: expected `param`, `buffer`, `int_buffer`, `stream`, `training`, `child`, `skip` or `rename = \"key\"`",
                    )),
                }
            })?;
        }
        let (member, default_key) = match &f.ident {
            Some(id) => {
                let s = id.to_string();
                let s = s.strip_prefix("r#").unwrap_or(&s).to_string();
                (syn::Member::Named(id.clone()), s)
            }
            None => (syn::Member::Unnamed(syn::Index::from(i)), i.to_string()),
        };
        let ty = f.ty.clone();
        let kind = match kind {
            Some(k) => k,
            None => infer_kind(&ty, &f.ident, i)?,
        };
        out.push(Field {
            member,
            key: rename.unwrap_or(default_key),
            span: ty.span(),
            ty,
            kind,
        });
    }
    Ok(out)
}

/// The kind of an unmarked field, from its type.
fn infer_kind(ty: &Type, ident: &Option<Ident>, index: usize) -> syn::Result<Kind> {
    if is_plain_data(ty) {
        return Ok(Kind::Skip);
    }
    let leaf = leaf_type(ty);
    Ok(match last_ident(leaf).as_deref() {
        Some("Tensor") => {
            let name = match ident {
                Some(i) => format!("`{i}`"),
                None => format!("field {index}"),
            };
            return Err(syn::Error::new(
                ty.span(),
                format!(
                    "{name} is a tensor: mark it #[module(param)] (a parameter, trained) or #[module(buffer)] (saved with the parameters, not trained), or #[module(skip)]"
                ),
            ));
        }
        Some("RandomStream") => Kind::Stream,
        Some("TrainingFlag") => Kind::Training,
        Some("IntBuffer") => Kind::IntBuffer,
        _ => Kind::Child,
    })
}

/// Two entries of one module must not share a key.
fn check_keys(fields: &[Field]) -> syn::Result<()> {
    let mut seen: Vec<&str> = Vec::new();
    for f in fields {
        if matches!(f.kind, Kind::Skip | Kind::Training) {
            continue;
        }
        if seen.contains(&f.key.as_str()) {
            return Err(syn::Error::new(
                f.span,
                format!("two entries of this module are named `{}`", f.key),
            ));
        }
        seen.push(&f.key);
    }
    Ok(())
}

/// The one type parameter bounded by a trait named `Backend` (in the parameter list or
/// the where-clause), if any.
fn backend_param(generics: &syn::Generics) -> syn::Result<Option<Ident>> {
    let is_backend = |b: &TypeParamBound| match b {
        TypeParamBound::Trait(t) => t.path.segments.last().is_some_and(|s| s.ident == "Backend"),
        _ => false,
    };
    let mut found: Vec<Ident> = Vec::new();
    for p in generics.type_params() {
        let mut bounded = p.bounds.iter().any(is_backend);
        if let Some(w) = &generics.where_clause {
            for pred in &w.predicates {
                if let WherePredicate::Type(t) = pred {
                    if let Type::Path(tp) = &t.bounded_ty {
                        if tp.qself.is_none() && tp.path.is_ident(&p.ident) {
                            bounded |= t.bounds.iter().any(is_backend);
                        }
                    }
                }
            }
        }
        if bounded {
            found.push(p.ident.clone());
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(syn::Error::new(
            generics.span(),
            "more than one type parameter is bounded by `Backend`: name the module's backend with #[module(backend = \"B\")]",
        )),
    }
}

/// The generic arguments of `Name<…>` when `ty` is a path type ending in `Name`.
fn wrapper_arg<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let seg = p.path.segments.last()?;
    if seg.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    let first = types.next()?;
    types.next().is_none().then_some(first)
}

/// How a field's value holds its entries.
enum Shape<'a> {
    /// `Option<T>`: one entry when `Some`.
    Option(&'a Type),
    /// `Vec<T>` or `[T; N]`: entries `name.0`, `name.1`, ….
    List(&'a Type),
    /// One entry.
    Leaf,
}

fn shape(ty: &Type) -> Shape<'_> {
    if let Some(t) = wrapper_arg(ty, "Option") {
        return Shape::Option(t);
    }
    if let Some(t) = wrapper_arg(ty, "Vec") {
        return Shape::List(t);
    }
    match ty {
        Type::Array(a) => Shape::List(&a.elem),
        Type::Group(g) => shape(&g.elem),
        Type::Paren(p) => shape(&p.elem),
        _ => Shape::Leaf,
    }
}

/// The type inside any `Option`, `Vec` and array layers.
fn leaf_type(ty: &Type) -> &Type {
    match shape(ty) {
        Shape::Option(t) | Shape::List(t) => leaf_type(t),
        Shape::Leaf => match ty {
            Type::Group(g) => leaf_type(&g.elem),
            Type::Paren(p) => leaf_type(&p.elem),
            _ => ty,
        },
    }
}

fn last_ident(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// Numbers, `bool`, `char`, `str` references, `PhantomData`, and arrays, tuples,
/// `Option`s and `Vec`s of them: data a module keeps but does not visit.
fn is_plain_data(ty: &Type) -> bool {
    const PRIMITIVES: &[&str] = &[
        "bool", "char", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64",
        "i128", "isize", "f32", "f64", "str",
    ];
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            if let Some(id) = p.path.get_ident() {
                return PRIMITIVES.contains(&id.to_string().as_str());
            }
            let last = p.path.segments.last().map(|s| s.ident.to_string());
            if last.as_deref() == Some("PhantomData") {
                return true;
            }
            match shape(ty) {
                Shape::Option(t) | Shape::List(t) => is_plain_data(t),
                Shape::Leaf => false,
            }
        }
        Type::Array(a) => is_plain_data(&a.elem),
        Type::Tuple(t) => t.elems.iter().all(is_plain_data),
        Type::Reference(r) => is_plain_data(&r.elem),
        Type::Group(g) => is_plain_data(&g.elem),
        Type::Paren(p) => is_plain_data(&p.elem),
        _ => false,
    }
}

/// Whether `ty` names any of `params`.
fn mentions_any(ty: &Type, params: &[Ident]) -> bool {
    if params.is_empty() {
        return false;
    }
    fn walk(tokens: TokenStream2, params: &[Ident]) -> bool {
        tokens.into_iter().any(|tt| match tt {
            proc_macro2::TokenTree::Ident(i) => params.contains(&i),
            proc_macro2::TokenTree::Group(g) => walk(g.stream(), params),
            _ => false,
        })
    }
    walk(ty.to_token_stream(), params)
}

/// The visitor calls for a value `access` (an expression of type `&ty`) named by the
/// expression `name` (a `&str`).
fn visit_field(
    f: &Field,
    ty: &Type,
    access: TokenStream2,
    name: TokenStream2,
    v: &Ident,
    private: &TokenStream2,
    depth: usize,
) -> TokenStream2 {
    if f.kind == Kind::Skip {
        return TokenStream2::new();
    }
    let x = format_ident!("__x{}", depth);
    match shape(ty) {
        Shape::Option(inner) => {
            let body = visit_field(f, inner, quote!(#x), name, v, private, depth + 1);
            quote! {
                if let ::core::option::Option::Some(#x) = #access {
                    #body
                }
            }
        }
        Shape::List(inner) => {
            let i = format_ident!("__i{}", depth);
            let n = format_ident!("__name{}", depth);
            let body = visit_field(f, inner, quote!(#x), quote!(&#n), v, private, depth + 1);
            quote! {
                for (#i, #x) in ::core::iter::Iterator::enumerate(
                    ::core::iter::IntoIterator::into_iter(#access),
                ) {
                    let #n = #private::index_name(#name, #i);
                    #body
                }
            }
        }
        Shape::Leaf => {
            let span = f.span;
            match f.kind {
                Kind::Child => quote_spanned!(span=> #v.child(#name, #access);),
                Kind::Param => quote_spanned!(span=> #v.parameter(#name, #access);),
                Kind::Buffer => quote_spanned!(span=> #v.buffer(#name, #access);),
                Kind::IntBuffer => quote_spanned!(span=> #v.int_buffer(#name, #access);),
                Kind::Stream => quote_spanned!(span=> #v.stream(#name, #access);),
                Kind::Training => quote_spanned!(span=> #v.training(#access);),
                Kind::Skip => TokenStream2::new(),
            }
        }
    }
}

/// The `describe` lines of a child field (same shapes as [`visit_field`]).
#[allow(clippy::too_many_arguments)]
fn describe_field(
    f: &Field,
    ty: &Type,
    access: TokenStream2,
    name: TokenStream2,
    d: &Ident,
    backend: &Type,
    private: &TokenStream2,
    depth: usize,
) -> TokenStream2 {
    let x = format_ident!("__x{}", depth);
    match shape(ty) {
        Shape::Option(inner) => {
            let body = describe_field(f, inner, quote!(#x), name, d, backend, private, depth + 1);
            quote! {
                if let ::core::option::Option::Some(#x) = #access {
                    #body
                }
            }
        }
        Shape::List(inner) => {
            let i = format_ident!("__i{}", depth);
            let n = format_ident!("__name{}", depth);
            let body = describe_field(
                f,
                inner,
                quote!(#x),
                quote!(&#n),
                d,
                backend,
                private,
                depth + 1,
            );
            quote! {
                for (#i, #x) in ::core::iter::Iterator::enumerate(
                    ::core::iter::IntoIterator::into_iter(#access),
                ) {
                    let #n = #private::index_name(#name, #i);
                    #body
                }
            }
        }
        Shape::Leaf => {
            let span = f.span;
            quote_spanned!(span=> #d.child::<#backend>(#name, #access);)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::expand;

    /// The code blocks of `nn/src/derive_misuse.md`: (fence line, code lines).
    fn blocks() -> Vec<(String, Vec<String>)> {
        let text = include_str!("../../nn/src/derive_misuse.md");
        let mut out = Vec::new();
        let mut current: Option<(String, Vec<String>)> = None;
        for line in text.lines() {
            if line.starts_with("```") {
                match current.take() {
                    Some(block) => out.push(block),
                    None => current = Some((line.to_string(), Vec::new())),
                }
            } else if let Some((_, code)) = current.as_mut() {
                code.push(line.to_string());
            }
        }
        out
    }

    /// The item under `#[derive(Module)]` in a block: from the derive to the first line
    /// that closes an item at column 0.
    fn derived_item(code: &[String]) -> syn::DeriveInput {
        let start = code
            .iter()
            .position(|l| l.starts_with("#[derive(") && l.contains("Module"))
            .expect("a block of derive_misuse.md derives Module");
        let len = code[start..]
            .iter()
            .position(|l| l == "}")
            .expect("the derived item ends with `}` at column 0");
        syn::parse_str(&code[start..=start + len].join("\n")).expect("the derived item parses")
    }

    /// Each `compile_fail` case of `derive_misuse.md` fails for its stated reason: a case
    /// without an error code is refused by the derive itself with the message of its
    /// hidden `// derive error:` line; a case with a code (a type error) is accepted by
    /// the derive, so the code comes from the expansion, not from the derive's input
    /// checks.
    #[test]
    fn derive_misuse_cases_fail_for_their_stated_reason() {
        let (mut refused, mut accepted) = (0, 0);
        for (fence, code) in blocks() {
            if !fence.contains("compile_fail") {
                continue;
            }
            let item = derived_item(&code);
            let stated = code
                .iter()
                .find_map(|l| l.strip_prefix("# // derive error: "));
            let has_code = fence.split(',').any(|t| {
                t.len() == 5 && t.starts_with('E') && t[1..].bytes().all(|b| b.is_ascii_digit())
            });
            match (stated, has_code) {
                (Some(message), false) => {
                    let err = expand(&item).expect_err(message).to_string();
                    assert!(
                        err.contains(message),
                        "expected the derive error {message:?}, got {err:?}"
                    );
                    refused += 1;
                }
                (None, true) => {
                    if let Err(e) = expand(&item) {
                        panic!("{fence}: the derive refuses a case stated as a type error: {e}");
                    }
                    accepted += 1;
                }
                _ => panic!(
                    "{fence}: a compile_fail case needs an error code or a `# // derive error:` line, not both"
                ),
            }
        }
        assert_eq!((refused, accepted), (7, 6));
    }
}
