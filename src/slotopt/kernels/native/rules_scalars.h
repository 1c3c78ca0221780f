/* The scalar vector of each compiled rule: where each of its entries is in `const double *s_`. GENERATED from the
 * descriptions next to the foreach kernels (@native.compiled(..., scalars=...) and native.slices(...) in
 * slotopt/kernels/<family>.py, read by slotopt/kernels/native/scalars.py) by tools/write_rules_scalars.py: do not
 * edit; tests/kernels/test_rule_scalars.py fails while it is not current. rules.inc reads an entry by name:
 * SV(rule, name) a number, FLAG(rule, name) a flag, INTEGER(rule, name) a whole number; a name of another kind
 * or another rule is not defined, so it does not compile. */
#ifndef SLOTOPT_RULES_SCALARS_H
#define SLOTOPT_RULES_SCALARS_H

/* adadelta (slotopt.kernels.adadelta): lr, rho, one_minus_rho, epsilon */
#define SV_adadelta_lr 0
#define SV_adadelta_rho 1
#define SV_adadelta_one_minus_rho 2
#define SV_adadelta_epsilon 3

/* adagrad (slotopt.kernels.adagrad): lr, epsilon, epsilon_inside_root (flag) */
#define SV_adagrad_lr 0
#define SV_adagrad_epsilon 1
#define FLAG_adagrad_epsilon_inside_root 2

/* adagrad_slices (slotopt.kernels.adagrad): lr, epsilon */
#define SV_adagrad_slices_lr 0
#define SV_adagrad_slices_epsilon 1

/* adam (slotopt.kernels.adam): alpha, one_minus_beta_1, one_minus_beta_2, epsilon, amsgrad (flag), decay (flag),
 * weight_decay, weight_decay_lr */
#define SV_adam_alpha 0
#define SV_adam_one_minus_beta_1 1
#define SV_adam_one_minus_beta_2 2
#define SV_adam_epsilon 3
#define FLAG_adam_amsgrad 4
#define FLAG_adam_decay 5
#define SV_adam_weight_decay 6
#define SV_adam_weight_decay_lr 7

/* adam_variable_update (slotopt.kernels.adam): alpha, epsilon, amsgrad (flag) */
#define SV_adam_variable_update_alpha 0
#define SV_adam_variable_update_epsilon 1
#define FLAG_adam_variable_update_amsgrad 2

/* adamax (slotopt.kernels.adam): lr, one_minus_beta_1, beta_2, epsilon, one_minus_beta_1_power, scaled (flag),
 * scaled_lr */
#define SV_adamax_lr 0
#define SV_adamax_one_minus_beta_1 1
#define SV_adamax_beta_2 2
#define SV_adamax_epsilon 3
#define SV_adamax_one_minus_beta_1_power 4
#define FLAG_adamax_scaled 5
#define SV_adamax_scaled_lr 6

/* apply_adadelta (slotopt.kernels.adadelta): lr, rho, one_minus_rho, epsilon, packet_row (integer) */
#define SV_apply_adadelta_lr 0
#define SV_apply_adadelta_rho 1
#define SV_apply_adadelta_one_minus_rho 2
#define SV_apply_adadelta_epsilon 3
#define INT_apply_adadelta_packet_row 4

/* apply_adagrad (slotopt.kernels.adagrad): lr, scalar_rows (flag), packet_row (integer) */
#define SV_apply_adagrad_lr 0
#define FLAG_apply_adagrad_scalar_rows 1
#define INT_apply_adagrad_packet_row 2

/* apply_adagrad_da (slotopt.kernels.adagrad): lr, t_l1, l2_t_lr, l1_positive (flag) */
#define SV_apply_adagrad_da_lr 0
#define SV_apply_adagrad_da_t_l1 1
#define SV_apply_adagrad_da_l2_t_lr 2
#define FLAG_apply_adagrad_da_l1_positive 3

/* apply_adagrad_da_rows (slotopt.kernels.adagrad): t, l1, l2, t_lr, l1_positive (flag) */
#define SV_apply_adagrad_da_rows_t 0
#define SV_apply_adagrad_da_rows_l1 1
#define SV_apply_adagrad_da_rows_l2 2
#define SV_apply_adagrad_da_rows_t_lr 3
#define FLAG_apply_adagrad_da_rows_l1_positive 4

/* apply_proximal_adagrad (slotopt.kernels.adagrad): lr, l1, l2, l1_positive (flag), packet_row (integer) */
#define SV_apply_proximal_adagrad_lr 0
#define SV_apply_proximal_adagrad_l1 1
#define SV_apply_proximal_adagrad_l2 2
#define FLAG_apply_proximal_adagrad_l1_positive 3
#define INT_apply_proximal_adagrad_packet_row 4

/* apply_rmsprop (slotopt.kernels.rmsprop): lr, one_minus_rho, momentum, epsilon, centered (flag) */
#define SV_apply_rmsprop_lr 0
#define SV_apply_rmsprop_one_minus_rho 1
#define SV_apply_rmsprop_momentum 2
#define SV_apply_rmsprop_epsilon 3
#define FLAG_apply_rmsprop_centered 4

/* decoupled_weight_decay (slotopt.kernels.weight_decay): weight_decay, lr */
#define SV_decoupled_weight_decay_weight_decay 0
#define SV_decoupled_weight_decay_lr 1

/* ftrl_root (slotopt.kernels.ftrl): lr, l1, two_l2, shrinkage, scalar_rows (flag) */
#define SV_ftrl_root_lr 0
#define SV_ftrl_root_l1 1
#define SV_ftrl_root_two_l2 2
#define SV_ftrl_root_shrinkage 3
#define FLAG_ftrl_root_scalar_rows 4

/* keras_momentum (slotopt.kernels.sgd): lr, momentum, nesterov (flag), decay (flag), weight_decay, weight_decay_lr
 * */
#define SV_keras_momentum_lr 0
#define SV_keras_momentum_momentum 1
#define FLAG_keras_momentum_nesterov 2
#define FLAG_keras_momentum_decay 3
#define SV_keras_momentum_weight_decay 4
#define SV_keras_momentum_weight_decay_lr 5

/* lion (slotopt.kernels.lion): lr, beta_1, one_minus_beta_1, beta_2, one_minus_beta_2 */
#define SV_lion_lr 0
#define SV_lion_beta_1 1
#define SV_lion_one_minus_beta_1 2
#define SV_lion_beta_2 3
#define SV_lion_one_minus_beta_2 4

/* momentum (slotopt.kernels.sgd): lr, momentum, nesterov (flag), fused_product (flag), lr_times_momentum */
#define SV_momentum_lr 0
#define SV_momentum_momentum 1
#define FLAG_momentum_nesterov 2
#define FLAG_momentum_fused_product 3
#define SV_momentum_lr_times_momentum 4

/* moving_average (slotopt.kernels.ema): momentum, one_minus_momentum */
#define SV_moving_average_momentum 0
#define SV_moving_average_one_minus_momentum 1

/* nadam (slotopt.kernels.adam): lr, one_minus_beta_1, one_minus_beta_2, mu_next, one_minus_mu, one_minus_product,
 * one_minus_product_next, one_minus_beta_2_power, epsilon */
#define SV_nadam_lr 0
#define SV_nadam_one_minus_beta_1 1
#define SV_nadam_one_minus_beta_2 2
#define SV_nadam_mu_next 3
#define SV_nadam_one_minus_mu 4
#define SV_nadam_one_minus_product 5
#define SV_nadam_one_minus_product_next 6
#define SV_nadam_one_minus_beta_2_power 7
#define SV_nadam_epsilon 8

/* nadam_cached (slotopt.kernels.adam): lr, beta_1, beta_2, one_minus_beta_1, one_minus_beta_2, one_minus_mu,
 * mu_next, one_minus_product, one_minus_product_next, one_minus_beta_2_power, epsilon */
#define SV_nadam_cached_lr 0
#define SV_nadam_cached_beta_1 1
#define SV_nadam_cached_beta_2 2
#define SV_nadam_cached_one_minus_beta_1 3
#define SV_nadam_cached_one_minus_beta_2 4
#define SV_nadam_cached_one_minus_mu 5
#define SV_nadam_cached_mu_next 6
#define SV_nadam_cached_one_minus_product 7
#define SV_nadam_cached_one_minus_product_next 8
#define SV_nadam_cached_one_minus_beta_2_power 9
#define SV_nadam_cached_epsilon 10

/* proximal_gradient_descent (slotopt.kernels.sgd): lr, lr_l1, denominator, l1_positive (flag) */
#define SV_proximal_gradient_descent_lr 0
#define SV_proximal_gradient_descent_lr_l1 1
#define SV_proximal_gradient_descent_denominator 2
#define FLAG_proximal_gradient_descent_l1_positive 3

/* rmsprop (slotopt.kernels.rmsprop): lr, rho, one_minus_rho, momentum_decay, epsilon, epsilon_inside_root (flag),
 * has_momentum (flag), centered (flag) */
#define SV_rmsprop_lr 0
#define SV_rmsprop_rho 1
#define SV_rmsprop_one_minus_rho 2
#define SV_rmsprop_momentum_decay 3
#define SV_rmsprop_epsilon 4
#define FLAG_rmsprop_epsilon_inside_root 5
#define FLAG_rmsprop_has_momentum 6
#define FLAG_rmsprop_centered 7

/* sgd (slotopt.kernels.sgd): lr, decay (flag), weight_decay, weight_decay_lr */
#define SV_sgd_lr 0
#define FLAG_sgd_decay 1
#define SV_sgd_weight_decay 2
#define SV_sgd_weight_decay_lr 3

/* sgd_slices (slotopt.kernels.sgd): lr */
#define SV_sgd_slices_lr 0

/* sparse_apply_rmsprop (slotopt.kernels.rmsprop): lr, rho, one_minus_rho, momentum, epsilon, centered (flag),
 * packet_row (integer) */
#define SV_sparse_apply_rmsprop_lr 0
#define SV_sparse_apply_rmsprop_rho 1
#define SV_sparse_apply_rmsprop_one_minus_rho 2
#define SV_sparse_apply_rmsprop_momentum 3
#define SV_sparse_apply_rmsprop_epsilon 4
#define FLAG_sparse_apply_rmsprop_centered 5
#define INT_sparse_apply_rmsprop_packet_row 6

#endif
