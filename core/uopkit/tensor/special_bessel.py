"""torch.special's Bessel functions of integer order as Tensor methods: the first and second kinds J0, J1, Y0, Y1
(`bessel_j0`, ...), the modified ones I0, I1 (`modified_bessel_i0`/`i1`, the `i0`/`i1` of tensor/special.py and
tensor/special_torch.py) and K0, K1 with their exp(x)-scaled forms, the spherical j0 and the Airy function Ai. Each is
a composition of elementwise ops (one fused kernel), compared with torch and with mpmath in
tests/test_special_bessel.py.

The approximations are our own, fitted offline with mpmath (40 digits) as Chebyshev interpolants, stored as
polynomials in the interval's variable t in [-1, 1], highest power first, of lower degree for float32:
- J and Y up to x = 8 (Abramowitz and Stegun 9.1.13 for Y's logarithm): on each piece, the function divided by the
  factor (x - z)(x + z) of the zero z it holds (z as a pair of floats, so x - z keeps its relative accuracy there),
  fitted in x**2, and for Y the part left after (2/pi) log(x/z) J(x); from x = 8 on, Hankel's form (A&S 9.2.5-6)
  sqrt(2/(pi x)) (P cos(x - phase) - Q sin(x - phase)) with P and Q fitted in (8/x)**2, the phase's sine and cosine
  taken from sin(x) and cos(x) (exact argument reduction) rather than from x - pi/4 rounded;
- K up to x = 1 from its power series (A&S 9.6.13, 9.6.11), beyond as exp(-x) / sqrt(x) times a fit in x on [1, 2]
  and in 2/x from 2 on (A&S 9.7.2's shape);
- Ai on [-2, 2] fitted in x, beyond as A&S 10.4.59 (exp(-zeta) over 2 sqrt(pi) x^(1/4)) and 10.4.60 (the oscillating
  form for x < -2) with zeta = 2/3 |x|^(3/2) and the series' sums fitted in 1/zeta.
Measured against mpmath in float64 they are within a few ulp where the function is well conditioned (near a zero, or
where the phase x or zeta is large, within a few ulp of the envelope's size per unit of the condition number); float32
within a few ulp, where torch's float32 loses digits (x - pi/4 rounded in float32 shifts the phase).

torch gives none of them a gradient: their results are detached (`backward` through them raises, as torch's). The
edges are torch's: J and Y are NaN at +-inf (torch's sin(inf)), Y0/Y1 -inf at 0 and NaN below, K0/K1 inf at 0 and NaN
below, 0 at inf; Ai NaN at +-inf. Half floats are computed in float32 (torch has no half kernels for these).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from uopkit.dtype import DType, dtypes
from uopkit.tensor.replay import replayed
from uopkit.tensor.series import _horner
from uopkit.tensor.special import _bessel_of_abs
from uopkit.tensor.support import in_float32

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# ---------------------------------------------------------------------------------------------------------------------
# the tables (see the module's docstring): zeros as (float64, the rest), then the fitted polynomials

_J0_ZEROS = (
    (2.404825557695773, -1.176691651530894e-16),
    (5.520078110286311, 8.088597146146722e-17),
)

_J1_ZEROS = (
    (3.8317059702075125, -1.5269184090088067e-16),
    (7.015586669815619, -9.414165653410389e-17),
)

_Y0_ZEROS = (
    (0.8935769662791675, 2.6596231539720385e-17),
    (3.957678419314858, -1.0764340697562706e-16),
    (7.086051060301773, -8.835285723085408e-17),
)

_Y1_ZEROS = (
    (2.197141326031017, -4.8259835876454966e-17),
    (5.429681040794135, 4.162514026670377e-16),
)

_J0_A = {
    dtypes.float32: (
        -4.938792072800546e-07, 1.1699602792195373e-05, -0.0002006032154013836, 0.0023496613113194098,
        -0.01703010709704055, 0.06466008454813083, -0.08866241912277732,
    ),
    dtypes.float64: (
        -2.2949314927498332e-17, 1.9187793486785772e-15, -1.3638615485834712e-13, 8.130830816296508e-12,
        -3.9943300696278635e-10, 1.5832284373591624e-08, -4.931799011179342e-07, 1.1671878503732114e-05,
        -0.0002006035650992283, 0.002349675176132567, -0.017030107053326454, 0.06466008281491797, -0.08866241912277732,
    ),
}  # fmt: skip

_J0_B = {
    dtypes.float32: (
        -4.095947306731343e-09, 7.632089905903191e-08, -1.144397598251265e-06, 1.3642069632545382e-05,
        -0.0001238044156975258, 0.000810838973809129, -0.0035108434817191867, 0.00833368930293065,
        -0.004098604022388819, -0.0203205069803698, 0.024016173691452314,
    ),
    dtypes.float64: (
        -6.12992736524399e-15, 2.2035229596019085e-13, -6.83438726052889e-12, 1.8176810782140992e-10,
        -4.0771232414894475e-09, 7.581997631709897e-08, -1.144416431798751e-06, 1.3642570896145354e-05,
        -0.00012380440745593917, 0.0008108387544376583, -0.003510843483191068, 0.008333689342110213,
        -0.004098604022315221, -0.020320506982328897, 0.024016173691452314,
    ),
}  # fmt: skip

_J1_A = {
    dtypes.float32: (
        -2.8081962575412802e-09, 6.456074548421018e-08, -1.1720926533749975e-06, 1.6413308511273067e-05,
        -0.00016941302963524338, 0.0012153011117901544, -0.005543863391761556, 0.013802088651419941,
        -0.013307054958076377,
    ),
    dtypes.float64: (
        -1.5280344482358584e-15, 7.223021454658357e-14, -2.9135163399864457e-12, 9.920297266825674e-11,
        -2.8016356886600484e-09, 6.433729501873252e-08, -1.1720975750193125e-06, 1.641347615668074e-05,
        -0.00016941302826797472, 0.0012153010652151198, -0.005543863391864105, 0.01380208865491326,
        -0.013307054958076377,
    ),
}  # fmt: skip

_J1_B = {
    dtypes.float32: (
        -3.0862978028905873e-09, 5.805609008314634e-08, -8.377550084181174e-07, 8.956184237108187e-06,
        -6.559903409686618e-05, 0.0002863211442422843, -0.000477261493518876, -0.0009396276366686161,
        0.0031721939175349623,
    ),
    dtypes.float64: (
        -3.264376181107433e-15, 1.3249893915780804e-13, -4.552202074253691e-12, 1.3078883951377563e-10,
        -3.0760443309539065e-09, 5.776136801032077e-08, -8.377627011233746e-07, 8.956405384248168e-06,
        -6.559903195969332e-05, 0.00028632108279992867, -0.00047726149367917256, -0.00093962763206009,
        0.0031721939175349623,
    ),
}  # fmt: skip

_Y0_A = {
    dtypes.float32: (
        2.2603812590996443e-09, -1.4434134213632263e-07, 6.660292677413501e-06, -0.0002082336688435869,
        0.0039935971011706775, -0.0395853853929446, 0.13835027216385942,
    ),
    dtypes.float64: (
        2.4905937096927246e-13, -2.6802069541779862e-11, 2.259945405916969e-09, -1.442944386310753e-07,
        6.660292895339555e-06, -0.00020823369229525218, 0.003993597101143437, -0.03958538539001316,
        0.13835027216385942,
    ),
}  # fmt: skip

_Y0_B = {
    dtypes.float32: (
        3.674294932337518e-06, -4.684652589565355e-05, 0.0003916316694955412, -0.0018258814715774786,
        0.0019482907460947054, 0.01609575741975342, -0.0397414929287511,
    ),
    dtypes.float64: (
        3.824592017630617e-15, -1.971895526222008e-13, 8.560199117257979e-12, -3.083308107467684e-10,
        9.012641653650347e-09, -2.0807448842730852e-07, 3.6585040748051365e-06, -4.6481720592769886e-05,
        0.0003916395677351097, -0.0018260639755024138, 0.0019482897586976338, 0.016095780236964216,
        -0.0397414929287511,
    ),
}  # fmt: skip

_Y0_C = {
    dtypes.float32: (
        2.9200377607605345e-08, -3.911980180134504e-07, 3.4152392720483445e-06, -1.3764614111006804e-05,
        -6.156798628689299e-05, 0.0009993807244202501, -0.0035212775569473586, -0.001891009207455585,
        0.019735159455870212,
    ),
    dtypes.float64: (
        6.955109406516203e-14, -2.41342076344692e-12, 6.916424273243483e-11, -1.604959335788586e-09,
        2.9044523326514935e-08, -3.87578714212852e-07, 3.4153562181828284e-06, -1.3767330512058532e-05,
        -6.156801877854146e-05, 0.000999381479205505, -0.0035212775545103016, -0.001891009264070844,
        0.019735159455870212,
    ),
}  # fmt: skip

_Y1_A = {
    dtypes.float32: (
        -4.291963421947949e-06, 8.709681908145722e-05, -0.001192323262946485, 0.009868183680519822,
        -0.03790439980360767, 0.005076148198891347, 0.1860079516954709,
    ),
    dtypes.float64: (
        -1.5732624427168523e-12, 9.033347657852325e-11, -4.194121204837523e-09, 1.5360709859600398e-07,
        -4.2846202683278905e-06, 8.68278090544342e-05, -0.0011923269350395229, 0.009868318215174093,
        -0.037904399344574534, 0.00507613138082448, 0.1860079516954709,
    ),
}  # fmt: skip

_Y1_B = {
    dtypes.float32: (
        -1.648001993780337e-05, 0.00014006095438310283, -0.0007699011654179768, 0.0022174561735498217,
        0.0017913941821937902, -0.03251688644487382, 0.05975546102541389, 0.05781288175274173, -0.1384629046466528,
    ),
    dtypes.float64: (
        -2.962124781752419e-13, 9.138326619206667e-12, -2.397309643877752e-10, 5.3069284747504015e-09,
        -9.691892886087483e-08, 1.424080060208717e-06, -1.626114199233024e-05, 0.00013683882438335647,
        -0.0007700655153500701, 0.00221987701350157, 0.00179143985780009, -0.032517559406715725, 0.05975545759910955,
        0.05781293223892696, -0.1384629046466528,
    ),
}  # fmt: skip

_P0 = {
    dtypes.float32: (
        1.300382560483741e-08, -2.0682205966119387e-07, 6.137365662869588e-06, -0.0005363669302632967,
        0.9994572757882519,
    ),
    dtypes.float64: (
        3.2274659236696375e-14, -1.0240462527458219e-13, 2.486651879170221e-13, -1.0160586409351026e-12,
        4.7832464504070676e-12, -2.4911156906092825e-11, 1.5500758850965851e-10, -1.2121099519052884e-09,
        1.2803760990761632e-08, -2.0527448258799454e-07, 6.137416080147722e-06, -0.0005363673192129684,
        0.9994572757882519,
    ),
}  # fmt: skip

_Q0 = {
    dtypes.float32: (
        -5.791878765405889e-09, 7.188862652142023e-08, -1.4771077366867912e-06, 6.833128295187358e-05,
        -0.015555113879513518,
    ),
    dtypes.float64: (
        -3.290512104579495e-14, 9.880614422104021e-14, -2.1358610324948248e-13, 8.17618961828763e-13,
        -3.600800980276718e-12, 1.7060039990025773e-11, -9.470049323873473e-11, 6.432700575092725e-10,
        -5.668716508839409e-09, 7.106214962531977e-08, -1.4771388326326161e-06, 6.833149099340181e-05,
        -0.015555113879513518,
    ),
}  # fmt: skip

_P1 = {
    dtypes.float32: (
        -1.492948707930859e-08, 2.471034787353911e-07, -7.95963902017941e-06, 0.00089880450547133, 1.0009070262780821,
    ),
    dtypes.float64: (
        -3.4273425511664546e-14, 1.0911783467601572e-13, -2.668914316041983e-13, 1.0958092927251801e-12,
        -5.1871998149145174e-12, 2.7234187811287063e-11, -1.713127898085761e-10, 1.360297066536911e-09,
        -1.470851251614582e-08, 2.45367663311693e-07, -7.959694698478657e-06, 0.0008988049416705195,
        1.0009070262780821,
    ),
}  # fmt: skip

_Q1 = {
    dtypes.float32: (
        6.555232906786695e-09, -8.383781979695884e-08, 1.8211677467134234e-06, -9.621435712205914e-05,
        0.04677687402744898,
    ),
    dtypes.float64: (
        3.486504421950585e-14, -1.0501510922586431e-13, 2.286132581833056e-13, -8.788872273527316e-13,
        3.888522348889332e-12, -1.8553134587620622e-11, 1.0394713335929504e-10, -7.151019662394418e-10,
        6.420132983280182e-09, -8.291960817886298e-08, 1.821201851212985e-06, -9.62145882205051e-05,
        0.04677687402744898,
    ),
}  # fmt: skip

_K_I0 = {
    dtypes.float32: (
        6.781684027777778e-08, 6.781684027777777e-06, 0.00043402777777777775, 0.015625, 0.25, 1.0,
    ),
    dtypes.float64: (
        2.896903392077112e-17, 9.385966990329842e-15, 2.4028075495244395e-12, 4.709502797067901e-10,
        6.781684027777778e-08, 6.781684027777777e-06, 0.00043402777777777775, 0.015625, 0.25, 1.0,
    ),
}  # fmt: skip

_K_R0 = {
    dtypes.float32: (
        1.6271056104815983e-07, 1.4914719299260428e-05, 0.000846035090708223, 0.025248929932162694, 0.2789828789146031,
        0.11593151565841245,
    ),
    dtypes.float64: (
        8.531090131958595e-17, 2.6597846806398086e-14, 6.508697838747355e-12, 1.2084261650077973e-09,
        1.6271056104815983e-07, 1.4914719299260428e-05, 0.000846035090708223, 0.025248929932162694, 0.2789828789146031,
        0.11593151565841245,
    ),
}  # fmt: skip

_K_I1X = {
    dtypes.float32: (
        5.651403356481481e-09, 6.781684027777778e-07, 5.425347222222222e-05, 0.0026041666666666665, 0.0625, 0.5,
    ),
    dtypes.float64: (
        1.4484516960385557e-18, 5.214426105738801e-16, 1.5017547184527747e-13, 3.363930569334215e-11,
        5.651403356481481e-09, 6.781684027777778e-07, 5.425347222222222e-05, 0.0026041666666666665, 0.0625, 0.5,
    ),
}  # fmt: skip

_K_S1 = {
    dtypes.float32: (
        -1.4030163700386776e-08, -1.5592887702038207e-06, -0.00011253607036630566, -0.004642182766471561,
        -0.08537071972865078, -0.3079657578292062,
    ),
    dtypes.float64: (
        -4.337967650781225e-18, -1.506627189831776e-15, -4.1617958191203955e-13, -8.871896219293853e-11,
        -1.4030163700386776e-08, -1.5592887702038207e-06, -0.00011253607036630566, -0.004642182766471561,
        -0.08537071972865078, -0.3079657578292062,
    ),
}  # fmt: skip

_K0_MID = {
    dtypes.float32: (
        -4.283916706288116e-06, 1.4258525242517814e-05, -3.824610541332423e-05, 0.00013043932802581608,
        -0.00045807422294941364, 0.0016076755944176419, -0.005752110927108401, 0.021094672766665386,
        1.1735628484887857,
    ),
    dtypes.float64: (
        -4.48867872844887e-11, 1.4245874539965705e-10, -2.4008603699791897e-10, 7.698009251677072e-10,
        -2.903457697520634e-09, 9.355340121648213e-09, -2.980414172079373e-08, 9.692548341482721e-08,
        -3.171998777091594e-07, 1.0433662085619003e-06, -3.455819826109848e-06, 1.1539366257857606e-05,
        -3.88958038030343e-05, 0.0001325716316776298, -0.00045789023716380175, 0.001607071882335334,
        -0.005752124824493943, 0.021094718364591175, 1.1735628484887857,
    ),
}  # fmt: skip

_K0_FAR = {
    dtypes.float32: (
        1.0516856689619109e-06, -2.977620741294366e-06, 6.749838404414084e-06, -2.409717983241107e-05,
        9.9633293100566e-05, -0.00047995238005893936, 0.0030328862797333006, -0.03107144790315802, 1.2185953385133905,
    ),
    dtypes.float64: (
        2.6167302273839806e-10, -4.802786287894041e-10, -4.780533482487136e-10, 8.216139380410184e-10,
        1.676071712933303e-09, -3.241469013359307e-09, 2.547717129273865e-09, -6.0482838956084346e-09,
        1.766510386115317e-08, -4.201355627730155e-08, 1.0276399888118862e-07, -2.6868600500269713e-07,
        7.42815618898008e-07, -2.191220151285867e-06, 7.002241956081613e-06, -2.473520015790187e-05,
        9.956054760222267e-05, -0.000479769056973863, 0.003032891810272341, -0.031071461824886657, 1.2185953385133905,
    ),
}  # fmt: skip

_K1_MID = {
    dtypes.float32: (
        2.786614981510157e-05, -8.766610961368895e-05, 0.00021439081679764402, -0.0006835112779035173,
        0.00224253067357931, -0.00726627129022274, 0.02380940192385619, -0.07926076896896497, 1.522561027922534,
    ),
    dtypes.float64: (
        5.0439362644945495e-11, -1.546680306215375e-10, 2.0994059619052527e-10, -6.467929188485274e-10,
        2.591330607116698e-09, -7.993450784480787e-09, 2.394660499699368e-08, -7.414092881334926e-08,
        2.3059775925261885e-07, -7.170593380202803e-07, 2.2353931788315486e-06, -6.990995438210667e-06,
        2.194193065089295e-05, -6.915633724438022e-05, 0.000219058926333221, -0.0006980924635603714,
        0.0022412062960882164, -0.0072621349750975036, 0.02380950202833138, -0.07926108160354786, 1.522561027922534,
    ),
}  # fmt: skip

_K1_FAR = {
    dtypes.float32: (
        -1.2706210546167125e-06, 3.668394118449358e-06, -8.664350230755339e-06, 3.208398722358732e-05,
        -0.00013967571542772755, 0.0007359423212353545, -0.005566723381872963, 0.10334972119081565, 1.363151890371342,
    ),
    dtypes.float64: (
        -2.8773454896030826e-10, 5.297308056318108e-10, 5.193232058567375e-10, -8.92916471067648e-10,
        -1.861573024405465e-09, 3.619444370318036e-09, -2.9553769088168094e-09, 7.048382137997918e-09,
        -2.0491894192421595e-08, 4.920248391531962e-08, -1.218240652576921e-07, 3.2273904752793343e-07,
        -9.067475161001896e-07, 2.7300879137808674e-06, -8.96120336007875e-06, 3.2843860727824176e-05,
        -0.00013959021976125947, 0.0007357241551358764, -0.005566729880071339, 0.1033497377538621, 1.363151890371342,
    ),
}  # fmt: skip

_AI_NEG_MID = {
    dtypes.float32: (
        -2.3287599114220564e-08, -3.09191491240792e-06, 1.451515635807878e-05, 1.867740300968685e-05,
        -0.0003617013573456653, 0.0009384909880885047, 0.002316187508630342, -0.017936781307381296,
        0.021468321327353844, 0.09095358512246435, -0.2677804415908771, -0.010160567475660355, 0.5355608832923521,
    ),
    dtypes.float64: (
        -1.5186204268105113e-13, 1.76902276136351e-12, -3.107003775888403e-12, -6.910958259741083e-11,
        5.583576514282947e-10, -3.7735557222751063e-10, -1.9216311238156043e-08, 1.1477467974622939e-07,
        3.557047213988465e-08, -3.46178948073979e-06, 1.4443037200423801e-05, 1.9138336449040312e-05,
        -0.0003616584983690508, 0.0009382148503096194, 0.0023161750730233775, -0.017936700835716694,
        0.02146832287746091, 0.0909535750681662, -0.26778044164617604, -0.01016056711664521, 0.5355608832923521,
    ),
}  # fmt: skip

_AI_POS_MID = {
    dtypes.float32: (
        -5.052337830358155e-08, 3.853615836942156e-07, -6.275829773311592e-07, -6.830778567991203e-06,
        4.9947714239130175e-05, -0.00010575748371818626, -0.0003866993182606599, 0.003183520161398027,
        -0.007625102598002272, -0.003975837702917274, 0.06764620815059465, -0.15914744128942124, 0.13529241631288141,
    ),
    dtypes.float64: (
        1.3127469945933672e-14, 1.0855412413680747e-14, -8.977487741454363e-13, 5.782595235012272e-12,
        1.581707432941012e-12, -2.7610506387558954e-10, 1.8425187839995755e-09, -1.4630945574049462e-09,
        -5.651273532304708e-08, 3.91851262741808e-07, -6.20097575624603e-07, -6.8395835255099324e-06,
        4.99432236486297e-05, -0.00010575200544680909, -0.0003866980086338243, 0.0031835185329561664,
        -0.007625102761696042, -0.003975837497318635, 0.06764620815644071, -0.1591474412967932, 0.13529241631288141,
    ),
}  # fmt: skip

_AI_POS_FAR = {
    dtypes.float32: (
        4.445207687591809e-06, -1.4764233373579963e-05, 4.800866456901049e-05, -0.0002265826880980416,
        0.001413259423528814, -0.014613620185148475, 0.983679282828043,
    ),
    dtypes.float64: (
        7.526660373531079e-11, -1.312142348488387e-10, -2.0101312186939644e-10, 3.392680489040315e-10,
        5.04595042876794e-10, -8.95736470849324e-10, 7.803713293049733e-11, -3.034816447545836e-10,
        2.289650544782728e-09, -4.899555816609795e-09, 1.0052404619720286e-08, -2.3606494583160094e-08,
        5.799726920227188e-08, -1.4817281679067514e-07, 3.997136957979187e-07, -1.1510183662497458e-06,
        3.587832363733895e-06, -1.2354391325262144e-05, 4.8463340572128394e-05, -0.00022785221366681627,
        0.0014132014717020143, -0.014613458724023488, 0.983679282828043,
    ),
}  # fmt: skip

_AI_NEG_FAR_S = {
    dtypes.float32: (
        1.454491925497339e-05, -5.367322312604478e-05, 7.247786566234819e-05, 0.00027341549406316494,
        -0.002945671843553508, 0.012344484466933581, 1.0154229490095708,
    ),
    dtypes.float64: (
        2.7227672367949595e-09, -3.1356830471823732e-09, -1.4429105667631477e-08, 1.9415993935108457e-08,
        2.5473319164363036e-08, -3.855375222044267e-08, -2.433519087424691e-08, 3.258256584724055e-08,
        4.059027817270474e-08, -6.137033463162166e-08, 2.0904108484235638e-08, 1.3796285324694675e-08,
        -9.863882392847369e-08, 3.4158213103434964e-07, -7.83434610086357e-07, 1.2665730439556675e-06,
        -9.096703061483196e-07, -3.202598472704439e-06, 1.796097865409011e-05, -5.1568533740184874e-05,
        7.049454613362631e-05, 0.000272930648660261, -0.0029454124634524207, 0.01234452084664508, 1.0154229490095708,
    ),
}  # fmt: skip

_AI_NEG_FAR_D = {
    dtypes.float32: (
        1.4269115407340653e-05, 1.9755211195890263e-06, -0.00015306148454241096, 0.0005519906525592581,
        -0.0002965139021339919, -0.02119148563658171, 0.9797976180067189,
    ),
    dtypes.float64: (
        -7.053633793294169e-10, 2.5066251762351446e-09, -7.522315261955249e-10, -7.2971276874183894e-09,
        9.019935204053842e-09, 1.974022660236272e-09, -4.896325487877808e-09, -7.392146181667964e-09,
        7.555391351168668e-09, 1.7891192265347294e-08, -5.755072633107532e-08, 1.1148809643141245e-07,
        -1.7758468527914228e-07, 1.8981767554905705e-07, 5.749884601407994e-08, -1.0154386129733052e-06,
        3.3993297918902638e-06, -7.425927333796414e-06, 8.74008728739845e-06, 1.643800112440097e-05,
        -0.00015039927323555127, 0.000544599218390388, -0.0002968418355572302, -0.02119055594206003,
        0.9797976180067189,
    ),
}  # fmt: skip


_TWO_OVER_PI = 2 / math.pi
_SQRT_PI = math.sqrt(math.pi)
# Ai's pieces meet at |x| = 2, where zeta = 2/3 * 2**1.5; its far fits are in zeta there over zeta
_ZETA_AT_TWO = 2 / 3 * 2**1.5
# sin(x)/x = sum (-x**2)^k / (2k + 1)! below |x| = 1/2: the terms that reach each dtype's precision there
_SINC_SERIES = {
    dt: tuple((-1) ** k / math.factorial(2 * k + 1) for k in reversed(range(terms)))
    for dt, terms in ((dtypes.float32, 5), (dtypes.float64, 8))
}


def _zero(pair: tuple[float, float], dt: DType) -> tuple[float, float]:
    # a zero as hi + lo in the dtype: x - hi is exact near it (Sterbenz's lemma) and lo carries the rest
    if dt == dtypes.float64:
        return pair
    hi = float(np.float32(pair[0]))
    return hi, float(np.float32((pair[0] - hi) + pair[1]))


def _from_zero(x: Tensor, pair: tuple[float, float]) -> Tensor:
    # x - z, to the dtype's relative precision near z
    hi, lo = _zero(pair, x.dtype)
    return (x - hi) - lo


def _around_zero(x: Tensor, pair: tuple[float, float]) -> Tensor:
    # (x - z)(x + z) for x >= 0
    return _from_zero(x, pair) * (x + _zero(pair, x.dtype)[0])


def _fit(v: Tensor, lo: float, hi: float, table: dict[DType, tuple[float, ...]]) -> Tensor:
    # the table's polynomial (of v's dtype) at v taken from [lo, hi] to [-1, 1]
    return _horner((v - (lo + hi) / 2) * (2 / (hi - lo)), table[v.dtype])


def _log_over(x: Tensor, pair: tuple[float, float]) -> Tensor:
    # log(x / z): near z as log1p((x - z) / z), accurate at the zero; elsewhere from x / z rounded
    inverse = 1 / (pair[0] + pair[1])
    ratio = x * inverse
    return ((ratio - 1).abs() < 0.5).where((_from_zero(x, pair) * inverse).log1p(), ratio.log())


# ---------------------------------------------------------------------------------------------------------------------
# J and Y


def _j0_near(a: Tensor) -> Tensor:
    # J0(a) for 0 <= a <= 8
    u = a * a
    first = _around_zero(a, _J0_ZEROS[0]) * _fit(u, 0, 16, _J0_A)
    second = _around_zero(a, _J0_ZEROS[1]) * _fit(u, 16, 64, _J0_B)
    return (a < 4).where(first, second)


def _j1_near(x: Tensor) -> Tensor:
    # J1(x) for |x| <= 8: x times an even function (the sign, -0.0 included, is x's)
    a = x.abs()
    u = a * a
    first = _around_zero(a, _J1_ZEROS[0]) * _fit(u, 0, 30.25, _J1_A)
    second = _around_zero(a, _J1_ZEROS[1]) * _fit(u, 30.25, 64, _J1_B)
    return x * (a < 5.5).where(first, second)


def _hankel(a: Tensor, order: int) -> tuple[Tensor, Tensor, Tensor]:
    """For a >= 8: (P + Q, P - Q) of Hankel's form, over sqrt(pi a), and (sin a, cos a). With the phase
    chi = a - (2 order + 1) pi/4, cos(chi) and sin(chi) are (cos a +- sin a) / sqrt 2 combinations, so
    J = (P cos chi - Q sin chi) sqrt(2/(pi a)) and Y = (P sin chi + Q cos chi) sqrt(2/(pi a)) are sums of
    (P +- Q) sin a and (P +- Q) cos a."""
    w = 8 / a
    t = w * w * 2 - 1
    p = _horner(t, (_P1 if order else _P0)[a.dtype])
    q = _horner(t, (_Q1 if order else _Q0)[a.dtype]) * w
    scale = (a.sqrt() * _SQRT_PI).reciprocal()
    return (p + q) * scale, (p - q) * scale, a.sin(), a.cos()


def _j0(x: Tensor) -> Tensor:
    a = x.abs()
    plus, minus, sin, cos = _hankel(a, 0)
    return (a <= 8).where(_j0_near(a), plus * cos + minus * sin)


def _j1(x: Tensor) -> Tensor:
    a = x.abs()
    plus, minus, sin, cos = _hankel(a, 1)
    far = (x < 0).where(-1.0, 1.0) * (plus * sin - minus * cos)
    return (a <= 8).where(_j1_near(x), far)


def _y_near(x: Tensor, order: int) -> Tensor:
    """Y_order(x) for 0 < x <= 8: on each piece (2/pi) log(x/z) J(x) + (x - z)(x + z) G(x**2) (over x for order 1),
    z the piece's zero of Y."""
    u = x * x
    if order:
        j, zeros, tables, cuts = _j1_near(x), _Y1_ZEROS, (_Y1_A, _Y1_B), (0.0, 14.44, 64.0)
    else:
        j, zeros, tables, cuts = _j0_near(x), _Y0_ZEROS, (_Y0_A, _Y0_B, _Y0_C), (0.0, 5.76, 30.25, 64.0)
    pieces = []
    for k, (pair, table) in enumerate(zip(zeros, tables, strict=True)):
        rest = _around_zero(x, pair) * _fit(u, cuts[k], cuts[k + 1], table)
        pieces.append(_TWO_OVER_PI * _log_over(x, pair) * j + (rest / x if order else rest))
    out = pieces[-1]
    for cut, piece in zip(cuts[-2:0:-1], pieces[-2::-1], strict=True):
        out = (u < cut).where(piece, out)
    return out


def _y(x: Tensor, order: int) -> Tensor:
    plus, minus, sin, cos = _hankel(x, order)
    far = -(minus * sin) - plus * cos if order else plus * sin - minus * cos
    out = (x <= 8).where(_y_near(x, order), far)
    return (x == 0).where(-math.inf, (x < 0).where(math.nan, out))


# ---------------------------------------------------------------------------------------------------------------------
# K


def _k(x: Tensor, order: int, scaled: bool) -> Tensor:
    """K_order(x), or exp(x) K_order(x) when `scaled`: up to 1 the series, -log(x) I0(x) + R(x**2) for K0 and
    1/x + x log(x) (I1(x)/x) + x S(x**2) for K1; beyond, exp(-x) / sqrt(x) times the fit on [1, 2] or in 2/x."""
    dt = x.dtype
    u = x * x
    if order:
        near = x.reciprocal() + x.log() * x * _horner(u, _K_I1X[dt]) + x * _horner(u, _K_S1[dt])
        mid, far = _K1_MID, _K1_FAR
    else:
        near = _horner(u, _K_R0[dt]) - x.log() * _horner(u, _K_I0[dt])
        mid, far = _K0_MID, _K0_FAR
    tail = (x <= 2).where(_fit(x, 1, 2, mid), _horner(4 / x - 1, far[dt])) / x.sqrt()
    out = (x <= 1).where(near * x.exp(), tail) if scaled else (x <= 1).where(near, tail * (-x).exp())
    return (x == 0).where(math.inf, (x < 0).where(math.nan, out))


# ---------------------------------------------------------------------------------------------------------------------
# Ai and the spherical j0


def _airy_ai(x: Tensor) -> Tensor:
    a = x.abs()
    middle = (x < 0).where(_fit(x, -2, 0, _AI_NEG_MID), _fit(x, 0, 2, _AI_POS_MID))
    root = a.sqrt()
    zeta = a * root * (2 / 3)
    quarter = root.sqrt()
    t = _ZETA_AT_TWO / zeta * 2 - 1
    decaying = _horner(t, _AI_POS_FAR[x.dtype]) / (quarter * (2 * _SQRT_PI)) * (-zeta).exp()
    plus, minus = _horner(t, _AI_NEG_FAR_S[x.dtype]), _horner(t, _AI_NEG_FAR_D[x.dtype])
    oscillating = (plus * zeta.sin() + minus * zeta.cos()) / (quarter * math.sqrt(2 * math.pi))
    out = (a <= 2).where(middle, (x > 0).where(decaying, oscillating))
    return x.isinf().where(math.nan, out)


def _spherical_j0(x: Tensor) -> Tensor:
    out = (x.abs() < 0.5).where(_horner(x * x, _SINC_SERIES[x.dtype]), x.sin() / x)
    return x.isinf().where(0.0, out)


# ---------------------------------------------------------------------------------------------------------------------
# the methods


class BesselMixin:
    __slots__ = ()

    @replayed
    @in_float32
    def bessel_j0(self) -> Tensor:
        """The Bessel function of the first kind of order 0, as torch.special.bessel_j0: even, 1 at 0, NaN at +-inf
        (torch's). Ints and bools promote to float32. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).bessel_j0().item(), 6)
        0.765198
        """
        return _j0(self._float().detach())

    @replayed
    @in_float32
    def bessel_j1(self) -> Tensor:
        """The Bessel function of the first kind of order 1, as torch.special.bessel_j1: odd, NaN at +-inf (torch's).
        Ints and bools promote to float32. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).bessel_j1().item(), 6)
        0.440051
        """
        return _j1(self._float().detach())

    @replayed
    @in_float32
    def bessel_y0(self) -> Tensor:
        """The Bessel function of the second kind of order 0, as torch.special.bessel_y0: -inf at 0, NaN below 0 and
        at inf (torch's). Ints and bools promote to float32. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).bessel_y0().item(), 6)
        0.088257
        """
        return _y(self._float().detach(), 0)

    @replayed
    @in_float32
    def bessel_y1(self) -> Tensor:
        """The Bessel function of the second kind of order 1, as torch.special.bessel_y1: -inf at 0, NaN below 0 and
        at inf (torch's). Ints and bools promote to float32. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).bessel_y1().item(), 6)
        -0.781213
        """
        return _y(self._float().detach(), 1)

    @replayed
    @in_float32
    def modified_bessel_i0(self) -> Tensor:
        """The modified Bessel function of the first kind of order 0, as torch.special.modified_bessel_i0: the values
        of `i0`, without a gradient (the result is detached, as torch's).

        >>> round(Tensor([1.0]).modified_bessel_i0().item(), 6)
        1.266066
        """
        return _bessel_of_abs(self._float().detach().abs(), 0)

    @replayed
    @in_float32
    def modified_bessel_i1(self) -> Tensor:
        """The modified Bessel function of the first kind of order 1, as torch.special.modified_bessel_i1: the values
        of `i1` (0.0 at -0.0, as torch's), without a gradient (the result is detached, as torch's).

        >>> round(Tensor([1.0]).modified_bessel_i1().item(), 6)
        0.565159
        """
        x = self._float().detach()
        # (the sign as a factor: a value read twice this deep would be stored, a second kernel)
        return (x < 0).where(-1.0, 1.0) * _bessel_of_abs(x.abs(), 1)

    @replayed
    @in_float32
    def modified_bessel_k0(self) -> Tensor:
        """The modified Bessel function of the second kind of order 0, as torch.special.modified_bessel_k0: inf at 0,
        NaN below 0, 0 at inf. Ints and bools promote to float32. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).modified_bessel_k0().item(), 6)
        0.421024
        """
        return _k(self._float().detach(), 0, False)

    @replayed
    @in_float32
    def modified_bessel_k1(self) -> Tensor:
        """The modified Bessel function of the second kind of order 1, as torch.special.modified_bessel_k1: inf at 0,
        NaN below 0, 0 at inf. Ints and bools promote to float32. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).modified_bessel_k1().item(), 6)
        0.601907
        """
        return _k(self._float().detach(), 1, False)

    @replayed
    @in_float32
    def scaled_modified_bessel_k0(self) -> Tensor:
        """exp(x) K0(x), as torch.special.scaled_modified_bessel_k0: computed without the exponential where it would
        underflow (about sqrt(pi / (2x)) for large x), inf at 0, NaN below 0, 0 at inf. No gradient: the result is
        detached, as torch's.

        >>> round(Tensor([1.0]).scaled_modified_bessel_k0().item(), 6)
        1.144463
        """
        return _k(self._float().detach(), 0, True)

    @replayed
    @in_float32
    def scaled_modified_bessel_k1(self) -> Tensor:
        """exp(x) K1(x), as torch.special.scaled_modified_bessel_k1: computed without the exponential where it would
        underflow, inf at 0, NaN below 0, 0 at inf. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).scaled_modified_bessel_k1().item(), 6)
        1.636153
        """
        return _k(self._float().detach(), 1, True)

    @replayed
    @in_float32
    def spherical_bessel_j0(self) -> Tensor:
        """The spherical Bessel function of the first kind of order 0, sin(x)/x, as torch.special.spherical_bessel_j0:
        its Taylor series below |x| = 1/2 (1 at 0), 0 at +-inf. No gradient: the result is detached, as torch's.

        >>> round(Tensor([1.0]).spherical_bessel_j0().item(), 6)
        0.841471
        """
        return _spherical_j0(self._float().detach())

    @replayed
    @in_float32
    def airy_ai(self) -> Tensor:
        """The Airy function Ai, as torch.special.airy_ai: decaying as exp(-2/3 x^(3/2)) on the right (0 once that
        underflows), oscillating on the left, NaN at +-inf (torch's). No gradient: the result is detached, as
        torch's.

        >>> round(Tensor([0.0]).airy_ai().item(), 6)
        0.355028
        """
        return _airy_ai(self._float().detach())
