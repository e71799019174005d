"""Regenerate the figures and the two archived papers of the embedded demo corpus (docbench_nb/demo).

Every figure is drawn from fixed numbers or fixed random seeds, so running this script again reproduces the
same plots (byte-identical on the same matplotlib/Pillow versions). The plotted values match what the
captions and tables of the demo papers state; change them together.

    python bench/make_demo_figures.py            # write figures + archives into docbench_nb/demo/papers
    python bench/make_demo_figures.py --check    # also print sizes

The two archived papers are authored as plain folders in bench/demo_archive_src/<id>/ and packed here:
`<id>.tex.gz` (single gzipped .tex, arXiv style) and `<id>.tar.gz` (a small source tree).
"""
import gzip, io, os, sys, tarfile
from pathlib import Path

import numpy as np
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT / 'docbench_nb' / 'demo' / 'papers'
ARCHIVE_SRC = ROOT / 'bench' / 'demo_archive_src'
TAR_PAPER, GZ_PAPER = 'longread-sv-sorghum', 'transmon-tls-fluctuations'

plt.rcParams.update({'font.size': 10, 'axes.spines.top': False, 'axes.spines.right': False,
                     'figure.figsize': (6, 4), 'savefig.dpi': 100, 'lines.linewidth': 1.6})


def save(fig, rel, root=PAPERS):
    "Save deterministically: no timestamps or software tags in PNG/PDF metadata."
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    ext = path.suffix.lower()
    if ext == '.png':
        fig.savefig(path, metadata={'Software': None}, pil_kwargs={'optimize': True})
    elif ext == '.pdf':
        fig.savefig(path, metadata={'CreationDate': None, 'ModDate': None, 'Producer': None, 'Creator': None})
    elif ext in ('.jpg', '.jpeg'):
        fig.savefig(path, pil_kwargs={'quality': 80, 'optimize': True})
    else:
        raise ValueError(f'unsupported figure type: {rel}')
    plt.close(fig)
    return path


def smooth(x, k):
    return np.convolve(x, np.ones(k) / k, mode='same')


# ---------------------------------------------------------------- dense retrieval (curriculum negatives)
def fig_curneg():
    rng = np.random.default_rng(1)
    steps = np.arange(0, 20001, 500)
    s = steps / 1000
    static = 0.41 - 0.19 * np.exp(-s / 2.5)
    hardest = 0.22 + 0.23 * (1 - np.exp(-s / 0.8)) - 0.0022 * np.clip(s - 4, 0, None)
    curr = 0.47 - 0.25 * np.exp(-s / 5.0)
    fig, ax = plt.subplots()
    for y, lab, c in [(static, 'static lexical negatives', '0.55'), (hardest, 'hardest-first', 'tab:red'),
                      (curr, 'curriculum (ours)', 'tab:blue')]:
        ax.plot(steps, y + rng.normal(0, 0.004, len(y)), label=lab, color=c)
    ax.axvline(4000, ls=':', color='tab:red', lw=1)
    ax.set_xlabel('training step'); ax.set_ylabel('Recall@10 (physics dev split)')
    ax.set_ylim(0.15, 0.52); ax.legend(frameon=False, loc='lower right')
    fig.tight_layout()
    return save(fig, 'curneg-dense-retrieval/figures/recall_curve.png')


# ---------------------------------------------------------------- late interaction pruning (figure*)
def fig_lateprune():
    fig, ax = plt.subplots(figsize=(9, 3.4))
    pts = {'unpruned': (41.8, 0.402), 'stopword removal': (29.7, 0.398), 'first-64 tokens': (21.6, 0.371),
           'attention-score pruning': (16.9, 0.389), 'single vector': (0.9, 0.352)}
    gate = [(15.9, 0.400), (8.1, 0.391), (4.7, 0.374)]
    for name, (x, y) in pts.items():
        ax.scatter([x], [y], marker='s', color='0.4', zorder=3)
        ax.annotate(name, (x, y), textcoords='offset points', xytext=(5, -11), fontsize=8)
    gx, gy = zip(*gate)
    ax.plot(gx, gy, '-o', color='tab:blue', label='learned gate (lambda = 0.01, 0.05, 0.1)')
    ax.plot([8.1, 41.8], [0.391, 0.402], ':', color='tab:blue', lw=1)
    ax.set_xscale('log'); ax.set_xlabel('index size (GB, log scale)'); ax.set_ylabel('nDCG@10')
    ax.set_ylim(0.34, 0.41); ax.legend(frameon=False, loc='lower right')
    fig.tight_layout()
    return save(fig, 'lateprune-multivector/img/pareto.pdf')


# ---------------------------------------------------------------- snowmelt streamflow (two subfigures)
def fig_snowmelt():
    rng = np.random.default_rng(3)
    days = np.arange(90, 271)  # 1 April .. 27 September (day of water-year-ish calendar)
    peak = 170  # ~ 19 June
    obs = 2.0 + 14 * np.exp(-0.5 * ((days - peak) / 18) ** 2) + np.abs(rng.normal(0, 0.5, len(days)))
    obs += 3 * np.exp(-0.5 * ((days - 215) / 3) ** 2)  # a summer storm
    swe = 2.0 + 13.2 * np.exp(-0.5 * ((days - peak - 1) / 18.5) ** 2) + 2.2 * np.exp(-0.5 * ((days - 215) / 4) ** 2)
    met = 2.0 + 10.5 * np.exp(-0.5 * ((days - peak + 14) / 20) ** 2) + 2.4 * np.exp(-0.5 * ((days - 215) / 4) ** 2)
    fig, ax = plt.subplots()
    ax.plot(days, obs, color='k', lw=1.2, label='observed')
    ax.plot(days, met, color='tab:orange', label='meteorology-only LSTM')
    ax.plot(days, swe, color='tab:blue', label='snow-informed LSTM')
    ax.set_xticks([91, 121, 152, 182, 213, 244]); ax.set_xticklabels(['Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep'])
    ax.set_ylabel('discharge (m$^3$ s$^{-1}$)'); ax.set_title('nival basin N07', fontsize=10)
    ax.legend(frameon=False); fig.tight_layout()
    a = save(fig, 'snowmelt-lstm-streamflow/figures/hydrograph_nival.png')

    rng = np.random.default_rng(4)
    obs = 1.2 + np.zeros(len(days))
    for c, h in [(105, 6), (131, 4), (160, 7), (188, 3), (229, 5), (251, 4)]:
        obs += h * np.exp(-np.clip(days - c, 0, None) / 4) * (days >= c)
    obs += np.abs(rng.normal(0, 0.25, len(days)))
    met = smooth(obs, 3) * 0.95 + 0.1
    swe = smooth(obs, 3) * 0.96 + 0.08
    fig, ax = plt.subplots()
    ax.plot(days, obs, color='k', lw=1.2, label='observed')
    ax.plot(days, met, color='tab:orange', label='meteorology-only LSTM')
    ax.plot(days, swe, color='tab:blue', ls='--', label='snow-informed LSTM')
    ax.set_xticks([91, 121, 152, 182, 213, 244]); ax.set_xticklabels(['Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep'])
    ax.set_ylabel('discharge (m$^3$ s$^{-1}$)'); ax.set_title('pluvial basin P12', fontsize=10)
    ax.legend(frameon=False); fig.tight_layout()
    b = save(fig, 'snowmelt-lstm-streamflow/figures/hydrograph_pluvial.png')
    return a, b


# ---------------------------------------------------------------- karst recession (semi-log, two reservoirs)
def fig_karst():
    rng = np.random.default_rng(5)
    t = np.arange(0, 61)
    Q0, fm, ac, am = 11.8, 0.18, 0.14, 0.008
    qc, qm = (1 - fm) * Q0 * np.exp(-ac * t), fm * Q0 * np.exp(-am * t)
    obs = (qc + qm) * np.exp(rng.normal(0, 0.03, len(t)))
    fig, ax = plt.subplots()
    ax.semilogy(t, obs, 'o', ms=3, color='k', label='observed daily discharge')
    ax.semilogy(t, qc, '--', color='tab:red', label='conduit reservoir ($\\alpha_c$ = 0.14 d$^{-1}$)')
    ax.semilogy(t, qm, '--', color='tab:blue', label='matrix reservoir ($\\alpha_m$ = 0.008 d$^{-1}$)')
    tx = np.log((1 - fm) / fm) / (ac - am)
    ax.axvline(tx, color='0.5', lw=1, ls=':'); ax.text(tx + 0.8, 6, f'crossover ~{tx:.0f} d', fontsize=8)
    ax.set_xlabel('days since flood peak'); ax.set_ylabel('discharge (m$^3$ s$^{-1}$)')
    ax.set_ylim(0.1, 20); ax.legend(frameon=False); fig.tight_layout()
    return save(fig, 'karst-spring-recession/recession.pdf')


# ---------------------------------------------------------------- perovskite humidity ageing
def fig_perovskite():
    rng = np.random.default_rng(6)
    t = np.arange(0, 1001, 25)
    def stretched(tau, beta): return np.exp(-(t / tau) ** beta)
    # T80 = tau * (-ln 0.8)^(1/beta): control 190 h, treated 760 h
    bc, bt = 0.9, 1.1
    tc = 190 / (-np.log(0.8)) ** (1 / bc); tt = 760 / (-np.log(0.8)) ** (1 / bt)
    fig, ax = plt.subplots()
    ax.errorbar(t, stretched(tc, bc) + rng.normal(0, 0.012, len(t)), yerr=0.03, fmt='o-', ms=3, color='tab:red',
                capsize=0, lw=1, label='control')
    ax.errorbar(t, stretched(tt, bt) + rng.normal(0, 0.012, len(t)), yerr=0.025, fmt='s-', ms=3, color='tab:blue',
                capsize=0, lw=1, label='TFEAI-treated (2 mM)')
    ax.axhline(0.8, ls=':', color='0.4', lw=1)
    ax.annotate('T$_{80}$ ~ 190 h', (190, 0.8), xytext=(230, 0.9), arrowprops=dict(arrowstyle='->'), fontsize=8)
    ax.annotate('T$_{80}$ ~ 760 h', (760, 0.8), xytext=(780, 0.93), arrowprops=dict(arrowstyle='->'), fontsize=8)
    ax.set_xlabel('storage time at 75% RH, 25 $^\\circ$C (h)'); ax.set_ylabel('normalized PCE')
    ax.set_ylim(0, 1.08); ax.legend(frameon=False, loc='lower left'); fig.tight_layout()
    return save(fig, 'perovskite-humidity-passivation/figures/pce_humidity.png')


# ---------------------------------------------------------------- garnet Arrhenius
def fig_garnet():
    kB = 8.617e-5
    TC = np.array([25, 40, 55, 70, 85, 100]); T = TC + 273.15
    def sig(s25, Ea): return s25 * np.exp(-Ea / kB * (1 / T - 1 / 298.15))
    fig, ax = plt.subplots()
    for s25, Ea, lab, m, c in [(4.9e-4, 0.41, 'conventional, 1230 $^\\circ$C (0.41 eV)', 'o', '0.4'),
                               (6e-6, 0.58, 'cold-sintered only (0.58 eV)', '^', 'tab:red'),
                               (5.8e-4, 0.39, 'cold-sintered + 900 $^\\circ$C anneal (0.39 eV)', 's', 'tab:blue')]:
        ax.semilogy(1000 / T, sig(s25, Ea) * T, m + '-', color=c, label=lab, ms=4)
    ax.set_xlabel('1000 / T (K$^{-1}$)'); ax.set_ylabel('$\\sigma T$ (S cm$^{-1}$ K)')
    ax.legend(frameon=False, fontsize=8); fig.tight_layout()
    return save(fig, 'garnet-cold-sintering/figures/arrhenius.pdf')


# ---------------------------------------------------------------- pollinator nestedness vs impervious cover
def fig_pollinator():
    rng = np.random.default_rng(7)
    x = np.sort(rng.uniform(3, 78, 24))
    e = rng.normal(0, 1, 24)
    X = np.column_stack([np.ones(24), x])
    e -= X @ np.linalg.lstsq(X, e, rcond=None)[0]          # residuals orthogonal to the line
    target_r2 = 0.46                                       # scale them so the fit is exactly slope -0.21, R2 0.46
    e *= np.sqrt(np.var(0.21 * x) * (1 - target_r2) / target_r2 / np.var(e))
    y = 35.5 - 0.21 * x + e
    b, a = np.polyfit(x, y, 1)
    r2 = 1 - np.sum((y - (a + b * x)) ** 2) / np.sum((y - y.mean()) ** 2)
    year = np.array([2021, 2022] * 12)
    fig, ax = plt.subplots()
    for yr, c in [(2021, 'tab:green'), (2022, 'tab:purple')]:
        ax.scatter(x[year == yr], y[year == yr], color=c, label=str(yr), s=22)
    xx = np.linspace(0, 80, 2)
    ax.plot(xx, 35.5 - 0.21 * xx, color='k', lw=1.2)
    ax.text(45, 33, 'slope = -0.21 per % cover\n$R^2$ = 0.46', fontsize=8)
    ax.set_xlabel('impervious surface within 500 m (%)'); ax.set_ylabel('nestedness (NODF)')
    ax.legend(frameon=False, title='sampling year'); fig.tight_layout()
    return save(fig, 'urban-pollinator-networks/figures/nestedness_impervious.png'), (b, r2)


# ---------------------------------------------------------------- bat passes by guild and light type
def fig_bats():
    guilds = ['Pipistrellus', 'Nyctalus/Eptesicus', 'Myotis', 'Plecotus']
    means = {'dark control': [21.4, 6.8, 9.7, 1.9], 'sodium (HPS)': [25.9, 7.5, 5.1, 1.2],
             'white LED': [35.7, 8.0, 2.6, 0.7]}
    se = {'dark control': [2.1, 1.0, 1.2, 0.4], 'sodium (HPS)': [2.4, 1.1, 0.8, 0.3], 'white LED': [3.0, 1.2, 0.5, 0.2]}
    fig, ax = plt.subplots()
    x = np.arange(len(guilds)); w = 0.26
    for i, (k, c) in enumerate(zip(means, ['0.2', 'tab:orange', 'tab:cyan'])):
        ax.bar(x + (i - 1) * w, means[k], w, yerr=se[k], color=c, label=k, capsize=2)
    ax.set_xticks(x); ax.set_xticklabels(guilds); ax.set_ylabel('bat passes per detector-night')
    ax.legend(frameon=False); fig.tight_layout()
    return save(fig, 'bat-activity-streetlights/bat_passes.png')


# ---------------------------------------------------------------- coiled-channel absorber
def fig_absorber():
    f = np.linspace(80, 600, 521)
    def peak(f0, a0, q): return a0 / (1 + ((f - f0) / (f0 / q)) ** 2)
    sim = np.maximum(peak(158, 0.99, 7.5), peak(474, 0.62, 9))
    meas = np.maximum(peak(152, 0.97, 6.8), peak(460, 0.55, 8))
    rng = np.random.default_rng(9)
    meas = np.clip(meas + rng.normal(0, 0.008, len(f)), 0, 1)
    fig, ax = plt.subplots()
    ax.plot(f, sim, '--', color='tab:gray', label='thermoviscous simulation')
    ax.plot(f, meas, color='tab:blue', label='impedance-tube measurement')
    ax.annotate('152 Hz, 0.97', (152, 0.97), xytext=(200, 0.9), arrowprops=dict(arrowstyle='->'), fontsize=8)
    ax.annotate('third-order mode', (460, 0.55), xytext=(360, 0.7), arrowprops=dict(arrowstyle='->'), fontsize=8)
    ax.set_xlabel('frequency (Hz)'); ax.set_ylabel('absorption coefficient'); ax.set_ylim(0, 1.05)
    ax.legend(frameon=False, loc='upper right'); fig.tight_layout()
    return save(fig, 'coiled-metamaterial-absorber/figures/absorption_sampleA.pdf')


# ---------------------------------------------------------------- TTV O-C diagram
def fig_ttv():
    rng = np.random.default_rng(10)
    Pb, Pc, Psup = 4.1823, 6.2961, 581.0
    fig, ax = plt.subplots()
    for P, amp, ph, c, lab, err in [(Pb, 6.8, 0.0, 'tab:blue', 'planet b', 1.9), (Pc, 9.5, np.pi, 'tab:red', 'planet c', 2.4)]:
        n = np.arange(0, int(1150 / P))
        keep = rng.random(len(n)) < (0.10 if P < 5 else 0.13)
        tn = n[keep] * P
        oc = amp * np.sin(2 * np.pi * tn / Psup + ph)
        ax.errorbar(tn, oc + rng.normal(0, err, len(tn)), yerr=err, fmt='o', ms=3, color=c, label=lab, lw=0.8)
        tt = np.linspace(0, 1150, 400)
        ax.plot(tt, amp * np.sin(2 * np.pi * tt / Psup + ph), color=c, lw=1)
    ax.axhline(0, color='0.6', lw=0.8)
    ax.set_xlabel('time since first transit (days)'); ax.set_ylabel('O $-$ C (minutes)')
    ax.legend(frameon=False); fig.tight_layout()
    return save(fig, 'ttv-compact-system/figs/ttv_oc.png')


# ---------------------------------------------------------------- quadruped terrain (two subfigures: jpg + pdf)
def fig_quadruped():
    terr = ['concrete', 'grass', 'gravel', 'sand', 'mulch', 'snow']
    cm = np.array([[97, 0, 2, 0, 0, 1], [0, 90, 2, 1, 7, 0], [2, 3, 89, 3, 3, 0],
                   [0, 1, 3, 93, 2, 1], [0, 14, 3, 2, 81, 0], [1, 0, 0, 3, 0, 96]]) / 100
    fig, ax = plt.subplots(figsize=(5, 4.2))
    ax.imshow(cm, cmap='Blues', vmin=0, vmax=1)
    for i in range(6):
        for j in range(6):
            ax.text(j, i, f'{cm[i, j]:.2f}', ha='center', va='center', fontsize=8,
                    color='w' if cm[i, j] > 0.5 else 'k')
    ax.set_xticks(range(6)); ax.set_xticklabels(terr, rotation=30); ax.set_yticks(range(6)); ax.set_yticklabels(terr)
    ax.set_xlabel('predicted'); ax.set_ylabel('true')
    for s in ax.spines.values(): s.set_visible(True)
    fig.tight_layout()
    a = save(fig, 'quadruped-terrain-proprioception/figures/confusion.jpg')
    w = np.array([0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5])
    f1 = np.array([0.78, 0.84, 0.88, 0.91, 0.915, 0.92, 0.92])
    fig, ax = plt.subplots(figsize=(5, 4.2))
    ax.plot(w, f1, 'o-', color='tab:blue')
    ax.set_xlabel('input window (s)'); ax.set_ylabel('macro F1'); ax.set_ylim(0.7, 0.95)
    ax.axvline(0.5, ls=':', color='0.5'); fig.tight_layout()
    b = save(fig, 'quadruped-terrain-proprioception/figures/window_length.pdf')
    return a, b


# ---------------------------------------------------------------- wastewater vs admissions
def fig_wastewater():
    rng = np.random.default_rng(12)
    d = np.arange(0, 900)  # Oct 2021 .. Mar 2024
    waves = [(95, 22, 1.0), (300, 30, 0.7), (520, 25, 0.55), (790, 28, 0.8)]
    rna = 0.08 + sum(h * np.exp(-0.5 * ((d - c) / s) ** 2) for c, s, h in waves)
    adm = 4 + sum(70 * h * np.exp(-0.5 * ((d - c - 8) / (s * 1.05)) ** 2) for c, s, h in waves)
    rna_obs = smooth(rna * np.exp(rng.normal(0, 0.25, len(d))), 7)
    adm_obs = rng.poisson(adm)
    fig, ax = plt.subplots()
    ax.plot(d, rna_obs, color='tab:brown', label='RNA / PMMoV (7-day mean)')
    ax.set_ylabel('normalized viral RNA'); ax.set_xlabel('days since 1 October 2021')
    ax2 = ax.twinx(); ax2.spines['right'].set_visible(True)
    ax2.bar(d, adm_obs, color='tab:gray', alpha=0.45, width=1.0, label='hospital admissions')
    ax2.set_ylabel('daily admissions')
    h1, l1 = ax.get_legend_handles_labels(); h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, frameon=False, loc='upper right'); fig.tight_layout()
    return save(fig, 'wastewater-nowcasting/figures/rna_admissions.png')


# ---------------------------------------------------------------- dengue lag-response (two subfigures)
def fig_dengue():
    lag = np.arange(0, 21)
    rr_t = 1 + 0.12 * np.exp(-0.5 * ((lag - 8) / 3.2) ** 2)
    lo, hi = rr_t - 0.035 - 0.002 * lag, rr_t + 0.035 + 0.002 * lag
    fig, ax = plt.subplots()
    ax.fill_between(lag, lo, hi, color='tab:red', alpha=0.2); ax.plot(lag, rr_t, color='tab:red')
    ax.axhline(1, color='k', lw=0.8); ax.set_xlabel('lag (weeks)'); ax.set_ylabel('relative risk')
    ax.set_title('weekly mean temperature 29 $^\\circ$C vs 25 $^\\circ$C', fontsize=10); fig.tight_layout()
    a = save(fig, 'dengue-climate-lags/plots/rr_lag_temperature.png')
    rr_r = 1 - 0.1 * np.exp(-0.5 * ((lag - 1.5) / 1.3) ** 2) + 0.06 * np.exp(-0.5 * ((lag - 10) / 2.2) ** 2)
    lo, hi = rr_r - 0.03 - 0.002 * lag, rr_r + 0.03 + 0.002 * lag
    fig, ax = plt.subplots()
    ax.fill_between(lag, lo, hi, color='tab:blue', alpha=0.2); ax.plot(lag, rr_r, color='tab:blue')
    ax.axhline(1, color='k', lw=0.8); ax.set_xlabel('lag (weeks)'); ax.set_ylabel('relative risk')
    ax.set_title('weekly rainfall 220 mm vs 0 mm', fontsize=10); fig.tight_layout()
    b = save(fig, 'dengue-climate-lags/plots/rr_lag_rainfall.png')
    return a, b


# ---------------------------------------------------------------- SV length spectrum (archived paper)
def fig_sv(root):
    rng = np.random.default_rng(14)
    bg = 10 ** rng.uniform(np.log10(50), np.log10(1e5), 30000) ** 1.0
    bg = bg[rng.random(len(bg)) < (50 / bg) ** 0.4]
    mite = rng.lognormal(np.log(300), 0.18, 9000)
    solo = rng.lognormal(np.log(1000), 0.12, 900)   # solo LTRs: a shoulder near 1 kb
    ltr = rng.lognormal(np.log(6000), 0.15, 5000)
    ins = np.concatenate([bg[: len(bg) // 2], mite[:6000], solo[:300], ltr[:3800]])
    dels = np.concatenate([bg[len(bg) // 2:], mite[6000:], solo[300:], ltr[3800:]])
    bins = np.logspace(np.log10(50), 5, 70)
    fig, ax = plt.subplots()
    ax.hist(ins, bins=bins, histtype='step', color='tab:blue', label='insertions', lw=1.4)
    ax.hist(dels, bins=bins, histtype='step', color='tab:red', label='deletions', lw=1.4)
    ax.set_xscale('log'); ax.set_xlabel('variant length (bp)'); ax.set_ylabel('count')
    ax.annotate('MITE peak (~300 bp)', (300, 1300), xytext=(700, 1500), arrowprops=dict(arrowstyle='->'), fontsize=8)
    ax.annotate('LTR retrotransposons\n(5-7 kb)', (6000, 700), xytext=(8000, 1100), arrowprops=dict(arrowstyle='->'),
                fontsize=8)
    ax.legend(frameon=False); fig.tight_layout()
    return save(fig, f'{TAR_PAPER}/figures/sv_lengths.png', root=root)


# ---------------------------------------------------------------- clinical abbreviation accuracy vs k
def fig_clinical():
    k = np.array([0, 1, 2, 4, 8, 16, 32])
    overall = np.array([0.842, 0.897, 0.921, 0.938, 0.946, 0.943, 0.938])
    rare = np.array([0.598, 0.655, 0.690, 0.712, 0.703, 0.671, 0.640])
    fig, ax = plt.subplots()
    ax.plot(range(len(k)), overall, 'o-', color='tab:blue', label='all test sentences')
    ax.plot(range(len(k)), rare, 's-', color='tab:orange', label='rare senses (<5% of usages)')
    ax.set_xticks(range(len(k))); ax.set_xticklabels([str(v) for v in k])
    ax.set_xlabel('retrieved exemplars per prompt'); ax.set_ylabel('accuracy'); ax.set_ylim(0.55, 1.0)
    ax.legend(frameon=False, loc='center right'); fig.tight_layout()
    return save(fig, 'clinical-abbrev-rap/figures/accuracy_vs_k.pdf')


# ---------------------------------------------------------------- distractor papers (same topics, other findings)
def fig_flu_passive():
    rng = np.random.default_rng(15)
    fig, ax = plt.subplots()
    for plant, c, n in [('plant N', 'tab:blue', 40), ('plant E', 'tab:orange', 38), ('plant S', 'tab:green', 36)]:
        x = rng.uniform(3.0, 6.0, n)
        y = 0.92 * x - 1.1 + rng.normal(0, 0.33, n)
        ax.scatter(10 ** x, 10 ** y, s=14, color=c, label=plant)
    xx = np.linspace(3, 6, 2)
    ax.plot(10 ** xx, 10 ** (0.92 * xx - 1.1), color='k', lw=1)
    ax.set_xscale('log'); ax.set_yscale('log')
    ax.set_xlabel('composite sample (copies per litre)'); ax.set_ylabel('passive sampler (copies per sampler-hour)')
    ax.text(1.5e3, 2e4, 'r = 0.81, slope 0.92', fontsize=8)
    ax.legend(frameon=False, loc='lower right'); fig.tight_layout()
    return save(fig, 'wastewater-influenza-rsv/figures/passive_vs_composite.png')


def fig_qp_bursts():
    t = np.linspace(-10, 120, 400)
    fig, ax = plt.subplots()
    for tau, amp, lab, c in [(28, 0.49, 'standard junctions (28 ms)', 'tab:red'),
                             (9, 0.17, 'gap-engineered junctions (9 ms)', 'tab:blue')]:
        g = 0.01 + amp * np.exp(-np.clip(t, 0, None) / tau) * (t >= 0)
        ax.plot(t, g, color=c, label=lab)
    ax.set_yscale('log'); ax.set_ylim(5e-3, 1)
    ax.set_xlabel('time after impact (ms)'); ax.set_ylabel('relaxation rate ($\\mu$s$^{-1}$)')
    ax.legend(frameon=False); fig.tight_layout()
    return save(fig, 'transmon-quasiparticle-bursts/figs/burst_recovery.pdf')


def fig_led_insects():
    cct = [2000, 2200, 3000, 4000]; mean = [18.4, 17.1, 25.3, 33.9]
    lo = [16.2, 15.0, 22.6, 30.5]; hi = [20.8, 19.4, 28.2, 37.6]
    fig, ax = plt.subplots()
    ax.errorbar(cct[1:], mean[1:], yerr=[np.subtract(mean, lo)[1:], np.subtract(hi, mean)[1:]], fmt='o-',
                color='tab:blue', capsize=3, label='phosphor-converted LED')
    ax.errorbar(cct[:1], mean[:1], yerr=[[mean[0] - lo[0]], [hi[0] - mean[0]]], fmt='s', color='tab:orange',
                capsize=3, label='high-pressure sodium')
    ax.set_xlabel('correlated colour temperature (K)'); ax.set_ylabel('insects per trap-night')
    ax.set_ylim(0, 40); ax.legend(frameon=False, loc='upper left'); fig.tight_layout()
    return save(fig, 'led-spectrum-insects/catches_cct.png')


def fig_glacier():
    d = np.arange(121, 305)  # 1 May .. 31 Oct
    snow = 9.0 * np.exp(-0.5 * ((d - 155) / 18) ** 2)   # crossover ~26 June (day 178)
    glac = 10.5 * np.exp(-0.5 * ((d - 208) / 22) ** 2)
    base = 1.6 + 0.6 * np.exp(-0.5 * ((d - 200) / 40) ** 2)
    rng = np.random.default_rng(16)
    rain = np.zeros(len(d))
    for c in rng.choice(len(d), 9, replace=False): rain[c:] += 2.5 * np.exp(-np.arange(len(d) - c) / 2.0)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.stackplot(d, snow, glac, base + rain, colors=['#9ecae1', '#08519c', '0.7'],
                 labels=['snowmelt', 'glacier melt', 'rain + groundwater'])
    ax.set_xticks([121, 152, 182, 213, 244, 274]); ax.set_xticklabels(['May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct'])
    ax.set_ylabel('discharge (m$^3$ s$^{-1}$)'); ax.legend(frameon=False, loc='upper right'); fig.tight_layout()
    return save(fig, 'glacier-melt-isotopes/figures/separation_2022.pdf')


def fig_perovskite_thermal():
    t = np.arange(0, 1601, 50)
    fig, ax = plt.subplots()
    rng = np.random.default_rng(17)
    for t80, beta, lab, c in [(95, 1.0, 'MAPbI$_3$', 'tab:red'), (310, 1.0, 'FA$_{0.85}$MA$_{0.15}$', 'tab:orange'),
                              (540, 1.1, 'Cs/FA/MA triple cation', 'tab:green'),
                              (1420, 1.2, 'Cs$_{0.15}$FA$_{0.85}$ (MA-free)', 'tab:blue')]:
        tau = t80 / np.log(0.97 / 0.8) ** (1 / beta)     # 3% reversible first-day loss, T80 vs initial
        y = 0.97 * np.exp(-(t / tau) ** beta); y[0] = 1.0
        ax.plot(t, y + rng.normal(0, 0.006, len(t)), 'o-', ms=2.5, lw=1, color=c, label=lab)
    ax.axhline(0.8, ls=':', color='0.4', lw=1)
    ax.set_xlabel('ageing time at 85 $^\\circ$C (h)'); ax.set_ylabel('normalized PCE'); ax.set_ylim(0, 1.05)
    ax.legend(frameon=False, fontsize=8); fig.tight_layout()
    return save(fig, 'perovskite-thermal-cation/img/thermal_ageing.png')


# ---------------------------------------------------------------- archives
def _tarinfo(name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 0; ti.mode = 0o644
    ti.uid = ti.gid = 0; ti.uname = ti.gname = ''
    return ti


def build_archives():
    "Pack bench/demo_archive_src/<id>/ into <id>.tar.gz and <id>.tex.gz, deterministically (mtime 0, sorted)."
    src = ARCHIVE_SRC / TAR_PAPER
    fig_sv(ARCHIVE_SRC)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for p in sorted(q for q in src.rglob('*') if q.is_file()):
            tf.addfile(_tarinfo(p.relative_to(src).as_posix(), p.read_bytes()), io.BytesIO(p.read_bytes()))
    out = PAPERS / f'{TAR_PAPER}.tar.gz'
    with open(out, 'wb') as f, gzip.GzipFile(filename='', fileobj=f, mode='wb', mtime=0) as gz:
        gz.write(buf.getvalue())
    tex = (ARCHIVE_SRC / GZ_PAPER / f'{GZ_PAPER}.tex').read_bytes()
    out2 = PAPERS / f'{GZ_PAPER}.tex.gz'
    with open(out2, 'wb') as f, gzip.GzipFile(filename=f'{GZ_PAPER}.tex', fileobj=f, mode='wb', mtime=0) as gz:
        gz.write(tex)
    return out, out2


def main():
    made = []
    for fn in [fig_curneg, fig_lateprune, fig_snowmelt, fig_karst, fig_perovskite, fig_garnet, fig_pollinator,
               fig_bats, fig_absorber, fig_ttv, fig_quadruped, fig_wastewater, fig_dengue, fig_clinical,
               fig_flu_passive, fig_qp_bursts, fig_led_insects, fig_glacier, fig_perovskite_thermal]:
        r = fn()
        if fn is fig_pollinator: r, (b, r2) = r; print(f'pollinator fit: slope {b:.3f}, R2 {r2:.2f}')
        made += list(r) if isinstance(r, tuple) else [r]
    made += list(build_archives())
    if '--check' in sys.argv:
        for p in made: print(f'{p.stat().st_size / 1024:7.1f} KB  {p.relative_to(ROOT)}')
        tot = sum(p.stat().st_size for p in (ROOT / 'docbench_nb' / 'demo').rglob('*') if p.is_file())
        print(f'demo dir total: {tot / 1024:.0f} KB')


if __name__ == '__main__':
    main()
