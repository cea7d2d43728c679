// The operations page (being written).

export async function render(main, params, ctx) {
  main.append(ctx.el('h1', {}, 'operations'));
}
