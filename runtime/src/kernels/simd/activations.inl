// The nonlinearities of every SIMD kernel (tanh, sigmoid, exp, relu),
// written over a `Vec` whose operations act lane by lane and nothing else:
// included by math.inl (the 8-lane Vec of vec_<isa>.h) and, for 16-lane
// updates, by avx512.cpp (vec_avx512.h's Vec). Each lane's operations are
// the same whatever the width, so both widths give the same bits. All inline.

// tanh(x) = x P(y) / Q(y), y = x^2 clamped to [0, 81] (tanh(9) is 1.0f
// to float precision): a 6/3 rational in y, minimax in absolute error on
// [0, 9], fitted by scripts/fit_tanh.py (which prints these coefficients).
// P and Q are evaluated by Estrin's scheme (y, y^2, y^4, then three levels of
// FMA) and the divide is a reciprocal estimate refined by one Newton step
// (2^-22), so that the dependent chain is about 30 cycles on Zen instead of
// the ~60 of a sigmoid built on exp: an LSTM or GRU step at small H waits
// on two of them in a row (the gates, then tanh(c') or n).
// The result is clamped to [-1, 1]: the roundings can pass 1 by a few ulp,
// and past |x| = 9 (y held at 81) the ratio grows with x.
// sigmoid(x) = 1/2 + tanh(x/2) / 2, so it stays in [0, 1].
// Measured over [-30, 30] in steps of 1.5e-6 against double: |tanh error|
// <= 3.9e-7, |sigmoid error| <= 2.3e-7 (the exp-based forms they replaced:
// 3.0e-7 and 1.6e-7; tests/unit/test_backends checks <= 1e-6 through every
// backend). NaN in gives NaN out (the clamps keep NaN, see vmax/vmin); +-inf
// give +-1, and 1, 0.
//
// Counted in operations, because a small-H LSTM / GRU step is bound by its
// floating-point operations (at H 16 the update's are as many as the
// products'): one min on y instead of a max and a min on x, and sigmoid's
// halving folded into the coefficients (the coefficient of y^k times 4^-k,
// on y = x^2, gives every intermediate of the rational on y = (x/2)^2
// exactly, being powers of 2; the numerator times x is twice the one times
// x/2, so 1/2 + tanh(x/2)/2 = 1/2 + that ratio / 4 exactly): 20 operations
// for tanh and 21 for sigmoid instead of 21 and 23. On Zen 4 the same bits
// as clamping x to [-9, 9] and multiplying by 1/2 for every float but NaN
// (scripts/check_vtanh.cpp runs over all of them; past 9 both give 1
// wherever the rational at 9 rounds to at least 1, as on Zen 4), and
// ferry_bench_kernels' LSTM / GRU steps at H 16 take 82.0-83.5 / 62.2-63.4
// ns instead of 85.2-89.7 / 65.4-72.2 (four alternations).

// P(y) / Q(y) * x with the coefficients of y^k scaled by S^k (S = 1, or
// 1/4 for sigmoid: exact), y as the caller computed it from x.
template <int kQuarter>
FERRY_VEC_INLINE Vec tanh_ratio(Vec x, Vec y) {
  constexpr float s1 = kQuarter ? 0.25f : 1.0f, s2 = s1 * s1, s3 = s2 * s1, s4 = s2 * s2, s5 = s4 * s1,
                  s6 = s3 * s3;
  const Vec y2 = vmul(y, y), y4 = vmul(y2, y2);
  const Vec p01 = vfma(vset1(0.127735108f * s1), y, vset1(0.999999523f));
  const Vec p23 = vfma(vset1(7.64964807e-06f * s3), y, vset1(0.00276020123f * s2));
  const Vec p45 = vfma(vset1(-9.47882051e-12f * s5), y, vset1(-6.59366739e-09f * s4));
  const Vec p03 = vfma(p23, y2, p01);
  const Vec p46 = vfma(vset1(6.60268552e-14f * s6), y2, p45);
  const Vec num = vmul(vfma(p46, y4, p03), x);
  const Vec q01 = vfma(vset1(0.461066663f * s1), y, vset1(1.0f));
  const Vec q23 = vfma(vset1(0.000205080389f * s3), y, vset1(0.0231177174f * s2));
  return vmul(num, vrecip(vfma(q23, y2, q01)));
}

// The clamps put the constant first, so that NaN comes through (vmin/vmax).
FERRY_VEC_INLINE Vec vtanh(Vec x) {
  const Vec r = tanh_ratio<0>(x, vmin(vset1(81.0f), vmul(x, x)));
  return vmin(vset1(1.0f), vmax(vset1(-1.0f), r));
}

FERRY_VEC_INLINE Vec vsigmoid(Vec x) {
  const Vec r = tanh_ratio<1>(x, vmin(vset1(324.0f), vmul(x, x)));  // 2 tanh(x / 2)
  return vfma(vset1(0.25f), vmin(vset1(2.0f), vmax(vset1(-2.0f), r)), vset1(0.5f));
}

// exp(z) for z already clamped to [-87, 87] (so that 2^n stays normal), for
// ELU: range reduction exp(z) = 2^n * exp(r), n = round(z / ln 2),
// r = z - n ln 2 in two steps (Cody-Waite; ln2_hi has 16 trailing zero bits,
// so n * ln2_hi is exact), and a degree-5 polynomial fitted (Lawson's
// iteration) for the relative error of exp on |r| <= ln(2)/2: max 9.2e-8.
FERRY_VEC_INLINE Vec vexp_clamped(Vec z) {
  const float kLog2e = 1.44269502162933349609375f;
  // 1.5 * 2^23 + 127: adding it rounds z * log2(e) to an integer n and
  // leaves n + 127 (the biased exponent of 2^n) in the low mantissa bits.
  const float kMagic = 12583039.0f;
  const float kLn2Hi = 0.693145751953125f;
  const float kLn2Lo = 1.428606765330187e-06f;
  const Vec nb = vfma(z, vset1(kLog2e), vset1(kMagic));
  const Vec s = vexp2_from_magic(nb);  // 2^n, n in [-126, 126]
  const Vec n = vsub(nb, vset1(kMagic));
  Vec r = vfma(n, vset1(-kLn2Hi), z);
  r = vfma(n, vset1(-kLn2Lo), r);
  Vec p = vfma(vset1(0.008290315046906471f), r, vset1(0.04189793020486832f));
  p = vfma(p, r, vset1(0.1666763573884964f));
  p = vfma(p, r, vset1(0.4999915063381195f));
  p = vfma(p, r, vset1(0.9999997019767761f));
  return vfma(vmul(s, r), p, s);  // 2^n * (1 + r p(r))
}

// exp(x) for x <= 0 (ELU's negative branch); below -87 it is 2^-126-ish
// rather than 0, far below what any output resolves.
FERRY_VEC_INLINE Vec vexp_nonpositive(Vec x) { return vexp_clamped(vmax(vset1(-87.0f), x)); }

// max(0, x); NaN stays NaN, -0 stays -0 (as the reference's x < 0 ? 0 : x).
FERRY_VEC_INLINE Vec vrelu(Vec x) { return vmax(vzero(), x); }
